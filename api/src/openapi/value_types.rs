//! The value types of a request's object, checked against its kind's OpenAPI schema as the
//! apiserver's decoding into the Go types checks them: a number where a string belongs, an
//! object for a list, a quantity or a time that does not parse is refused (400, with Go's
//! words for it), before anything is stored. Without it one ill-typed object, once stored,
//! could not be transcoded to protobuf, and every protobuf LIST and WATCH of its resource
//! would fail on it.
//!
//! One walk over the object beside the schema: each value is visited once, the walk follows
//! the schema's nesting only (a field the schema does not describe, or describes as free-form
//! JSON, is not entered) and stops past [`MAX_DEPTH`] levels. `null` is accepted anywhere, as
//! Go accepts it (a pointer, map or list left nil; any other value left at its zero value).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

/// How deep the walk follows the schema. The served types nest about 15 levels; a schema that
/// refers to itself could go on as long as the object does.
pub const MAX_DEPTH: usize = 64;

/// A value that does not fit its field's type: the text the apiserver's decoder gives.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ValueError(pub String);

const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
const INT_OR_STRING: &str = "io.k8s.apimachinery.pkg.util.intstr.IntOrString";
const RAW_JSON: &[&str] = &[
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1",
    "io.k8s.apimachinery.pkg.runtime.RawExtension",
    // A CRD schema's `default`, `enum` and `example` values, and the fields that are a schema
    // or something else (`items`, `additionalProperties`, `dependencies`): any JSON.
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray",
];

/// Checks `object` against definition `root` of `definitions` (OpenAPI v2 definitions, whose
/// references read `#/definitions/<name>`).
pub(super) fn check(
    definitions: &Map<String, Value>,
    root: &str,
    object: &Map<String, Value>,
) -> Result<(), ValueError> {
    let Some(schema) = definitions.get(root) else {
        return Ok(());
    };
    let mut walk = Walk {
        definitions,
        path: Vec::new(),
    };
    walk.object(schema, short_name(root), object, 0)
}

/// The Go name of a definition: its last segment (`io.k8s.api.core.v1.PodSpec`: `PodSpec`).
fn short_name(definition: &str) -> &str {
    definition.rsplit('.').next().unwrap_or(definition)
}

/// A definition's Go type as Go prints it, package and name (`v1.PodSpec`, `resource.Quantity`).
fn go_name(definition: &str) -> String {
    let mut parts = definition.rsplit('.');
    let name = parts.next().unwrap_or(definition);
    match parts.next() {
        Some(package) => format!("{package}.{name}"),
        None => name.to_owned(),
    }
}

struct Walk<'a> {
    definitions: &'a Map<String, Value>,
    /// The JSON names of the struct fields from the root to the value being checked (map keys
    /// and list indices are not named, as Go's decoder names a field).
    path: Vec<&'a str>,
}

/// What the JSON holds, in Go's decoder's words.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

impl<'a> Walk<'a> {
    /// `schema`, followed through references: the schema and the name of the definition the
    /// last reference named.
    fn resolve(&self, schema: &'a Value) -> (&'a Value, Option<&'a str>) {
        let mut at = schema;
        let mut name = None;
        for _ in 0..8 {
            let reference = at
                .get("$ref")
                .or_else(|| at.get("allOf").and_then(|a| a.get(0)).and_then(|a| a.get("$ref")))
                .and_then(Value::as_str)
                .and_then(|r| r.rsplit('/').next());
            match reference.and_then(|r| self.definitions.get_key_value(r)) {
                Some((n, def)) => {
                    name = Some(n.as_str());
                    at = def;
                }
                None => break,
            }
        }
        (at, name)
    }

    /// The Go type of `schema`, for messages.
    fn go_type(&self, schema: &'a Value, depth: usize) -> String {
        let (schema, name) = self.resolve(schema);
        if let Some(name) = name
            && (schema.get("properties").is_some() || name == QUANTITY || name == INT_OR_STRING)
        {
            return go_name(name);
        }
        let ty = schema.get("type").and_then(Value::as_str);
        let format = schema.get("format").and_then(Value::as_str);
        match (ty, format) {
            (Some("string"), Some("byte")) => "[]uint8".into(),
            (Some("string"), Some("date-time")) => name.map_or_else(|| "v1.Time".into(), go_name),
            (Some("string"), _) => "string".into(),
            (Some("integer"), Some("int32")) => "int32".into(),
            (Some("integer"), _) => "int64".into(),
            (Some("number"), _) => "float64".into(),
            (Some("boolean"), _) => "bool".into(),
            (Some("array"), _) if depth < 8 => match schema.get("items") {
                Some(items) => format!("[]{}", self.go_type(items, depth + 1)),
                None => "[]interface {}".into(),
            },
            (Some("object"), _) if depth < 8 => match schema.get("additionalProperties") {
                Some(values) if values.is_object() => {
                    format!("map[string]{}", self.go_type(values, depth + 1))
                }
                _ => "map[string]interface {}".into(),
            },
            _ => "interface {}".into(),
        }
    }

    /// Go's words for a value of the wrong kind in the field at the current path of struct
    /// `owner`.
    fn mismatch(&self, owner: &str, found: &str, schema: &'a Value) -> ValueError {
        ValueError(format!(
            "json: cannot unmarshal {found} into Go struct field {owner}.{} of type {}",
            self.path.join("."),
            self.go_type(schema, 0)
        ))
    }

    /// A value whose kind is right but whose text is not (a quantity, a time, base64).
    fn malformed(&self, why: String) -> ValueError {
        ValueError(format!("{}: {why}", self.path.join(".")))
    }

    /// The fields of `object`, a struct of `schema` named `owner` in Go.
    fn object(
        &mut self,
        schema: &'a Value,
        owner: &'a str,
        object: &'a Map<String, Value>,
        depth: usize,
    ) -> Result<(), ValueError> {
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return Ok(());
        };
        for (name, value) in object {
            // Fields the schema does not know were pruned (or are named in warnings) already.
            if let Some(field_schema) = properties.get(name) {
                self.path.push(name);
                self.value(field_schema, owner, value, depth + 1)?;
                self.path.pop();
            }
        }
        Ok(())
    }

    /// One value of `schema`, in a field of struct `owner`.
    fn value(
        &mut self,
        schema: &'a Value,
        owner: &'a str,
        value: &'a Value,
        depth: usize,
    ) -> Result<(), ValueError> {
        if value.is_null() {
            return Ok(());
        }
        if depth > MAX_DEPTH {
            return Err(self.malformed(format!("the object is nested more than {MAX_DEPTH} levels deep")));
        }
        let (resolved, name) = self.resolve(schema);
        match name {
            Some(QUANTITY) => return self.quantity(owner, schema, value),
            Some(INT_OR_STRING) => return self.int_or_string(owner, schema, value),
            Some(n) if RAW_JSON.contains(&n) => return Ok(()), // any JSON, kept as it is
            _ => {}
        }
        let ty = resolved.get("type").and_then(Value::as_str);
        let format = resolved.get("format").and_then(Value::as_str);
        match (ty, value) {
            (Some("string"), Value::String(s)) => match format {
                Some("date-time") => s
                    .parse::<jiff::Timestamp>()
                    .map(|_| ())
                    .map_err(|e| self.malformed(format!("parsing time {s:?} as RFC 3339: {e}"))),
                Some("byte") => STANDARD
                    .decode(s)
                    .map(|_| ())
                    .map_err(|e| self.malformed(format!("illegal base64 data: {e}"))),
                _ => Ok(()),
            },
            (Some("integer"), Value::Number(n)) => {
                let fits = match format {
                    Some("int32") => n.as_i64().is_some_and(|i| i32::try_from(i).is_ok()),
                    _ => n.as_i64().is_some(),
                };
                if fits {
                    Ok(())
                } else {
                    Err(self.mismatch(owner, &format!("number {n}"), schema))
                }
            }
            (Some("number"), Value::Number(_)) | (Some("boolean"), Value::Bool(_)) => Ok(()),
            (Some("array"), Value::Array(items)) => match resolved.get("items") {
                Some(item_schema) => items
                    .iter()
                    .try_for_each(|item| self.value(item_schema, owner, item, depth + 1)),
                None => Ok(()),
            },
            (Some("object") | None, Value::Object(fields)) => {
                if let Some(values) = resolved.get("additionalProperties").filter(|a| a.is_object()) {
                    return fields
                        .values()
                        .try_for_each(|v| self.value(values, owner, v, depth + 1));
                }
                let owner = name.map_or(owner, short_name);
                self.object(resolved, owner, fields, depth)
            }
            // A schema that says nothing of the type takes anything.
            (None, _) if resolved.get("properties").is_none() => Ok(()),
            (_, v) => Err(self.mismatch(owner, json_kind(v), schema)),
        }
    }

    /// `resource.Quantity`: a string or a number, in the quantity grammar.
    fn quantity(&self, owner: &str, schema: &'a Value, value: &Value) -> Result<(), ValueError> {
        match value {
            Value::Number(_) => Ok(()), // JSON's number grammar is a part of the quantity's
            // apimachinery's parser, and its own words, as Go's decoding reports them.
            Value::String(s) => crate::validation::parse_quantity(s)
                .map(drop)
                .map_err(|why| ValueError(why.to_owned())),
            other => Err(self.mismatch(owner, json_kind(other), schema)),
        }
    }

    /// `intstr.IntOrString`: a string, or an integer that fits 32 bits.
    fn int_or_string(&self, owner: &str, schema: &'a Value, value: &Value) -> Result<(), ValueError> {
        match value {
            Value::String(_) => Ok(()),
            Value::Number(n) if n.as_i64().is_some_and(|i| i32::try_from(i).is_ok()) => Ok(()),
            Value::Number(n) => Err(self.mismatch(owner, &format!("number {n}"), schema)),
            other => Err(self.mismatch(owner, json_kind(other), schema)),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn defs() -> Map<String, Value> {
        let v = json!({
            "Q": {"x-kubernetes-int-or-string": true},
            "ns.v1.Thing": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "count": {"type": "integer", "format": "int32"},
                    "big": {"type": "integer", "format": "int64"},
                    "on": {"type": "boolean"},
                    "when": {"type": "string", "format": "date-time"},
                    "blob": {"type": "string", "format": "byte"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "child": {"$ref": "#/definitions/ns.v1.Thing"},
                    "limits": {"type": "object", "additionalProperties": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.api.resource.Quantity"}},
                    "port": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.util.intstr.IntOrString"},
                    "raw": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1"},
                    "free": {"type": "object"},
                }
            },
            "io.k8s.apimachinery.pkg.api.resource.Quantity": {"x-kubernetes-int-or-string": true},
            "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"x-kubernetes-int-or-string": true},
            "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1": {"type": "object"},
        });
        v.as_object().unwrap().clone()
    }

    fn check_value(v: Value) -> Result<(), ValueError> {
        check(&defs(), "ns.v1.Thing", v.as_object().unwrap())
    }

    #[test]
    fn values_of_the_right_types_and_nulls_pass() {
        let ok = json!({
            "name": "a", "count": 2147483647, "big": -9007199254740993i64, "on": true,
            "when": "2024-05-01T10:00:00Z", "blob": "aGk=", "tags": ["x", null], "labels": {"a": "b", "c": null},
            "child": {"name": "b", "child": {"count": 1}}, "limits": {"cpu": "250m", "mem": "1.5Gi", "n": 2, "e": "1e3"},
            "port": 8080, "raw": {"f:x": {}}, "free": {"anything": [1, {"at": "all"}]}, "unknown": 7, "count2": null,
        });
        check_value(ok).unwrap();
        check_value(json!({"port": "http", "name": null, "child": null})).unwrap();
    }

    #[test]
    fn each_mismatch_names_the_field_and_both_types_as_go_does() {
        for (v, want) in [
            (
                json!({"name": 1}),
                "cannot unmarshal number into Go struct field Thing.name of type string",
            ),
            (
                json!({"count": "1"}),
                "cannot unmarshal string into Go struct field Thing.count of type int32",
            ),
            (
                json!({"count": 2147483648u64}),
                "cannot unmarshal number 2147483648 into Go struct field Thing.count of type int32",
            ),
            (
                json!({"count": 1.5}),
                "cannot unmarshal number 1.5 into Go struct field Thing.count of type int32",
            ),
            (json!({"big": 18446744073709551615u64}), "of type int64"),
            (
                json!({"tags": {"a": 1}}),
                "cannot unmarshal object into Go struct field Thing.tags of type []string",
            ),
            (
                json!({"tags": [1]}),
                "cannot unmarshal number into Go struct field Thing.tags of type string",
            ),
            (
                json!({"labels": {"a": 1}}),
                "Go struct field Thing.labels of type string",
            ),
            (
                json!({"labels": ["a"]}),
                "cannot unmarshal array into Go struct field Thing.labels of type map[string]string",
            ),
            (
                json!({"child": {"child": {"on": "yes"}}}),
                "Go struct field Thing.child.child.on of type bool",
            ),
            (json!({"child": "x"}), "of type v1.Thing"),
            (json!({"limits": {"cpu": true}}), "of type resource.Quantity"),
            (
                json!({"limits": {"cpu": "lots"}}),
                "quantities must match the regular expression",
            ),
            (json!({"port": 1.5}), "of type intstr.IntOrString"),
            (json!({"port": [80]}), "cannot unmarshal array"),
            (json!({"when": "yesterday"}), "when: parsing time \"yesterday\""),
            (json!({"when": 5}), "of type v1.Time"),
            (json!({"blob": "no!"}), "blob: illegal base64 data"),
            (json!({"free": "x"}), "Thing.free of type map[string]interface {}"),
        ] {
            let err = check_value(v.clone()).expect_err(&v.to_string());
            assert!(err.0.contains(want), "{v}: {err}");
        }
    }

    #[test]
    fn the_walk_is_bounded_in_depth_and_visits_each_value_once() {
        // A schema that refers to itself, and an object 10,000 levels deep: an error, not a
        // stack overflow.
        let mut deep = json!({"name": "leaf"});
        for _ in 0..10_000 {
            // Not `json!`, which serialises an interpolated value (recursively).
            let mut m = Map::new();
            m.insert("child".into(), deep);
            deep = Value::Object(m);
        }
        let err = check(&defs(), "ns.v1.Thing", deep.as_object().unwrap()).unwrap_err();
        assert!(err.0.contains("nested more than 64 levels"), "{err}");
        // Cloning or dropping such a value recurses too (serde_json's own limit keeps parsed
        // bodies shallower): it is taken apart here without recursion.
        let mut stack = vec![deep];
        while let Some(mut v) = stack.pop() {
            if let Some(child) = v.get_mut("child").map(Value::take) {
                stack.push(child);
            }
        }
        // A wide object is one pass: 200,000 list elements and map values.
        let wide = json!({
            "tags": vec!["t"; 200_000],
            "labels": (0..200_000).map(|i| (i.to_string(), json!("v"))).collect::<Map<String, Value>>(),
        });
        check_value(wide).unwrap();
    }

    #[test]
    fn quantities_follow_the_grammar() {
        let is_quantity = |s: &str| crate::validation::parse_quantity(s).is_ok();
        for ok in [
            "1", "-1", "+1.5", ".5", "5.", "250m", "1.5Gi", "1e3", "1E-3", "2E", "100n", "3u", "0",
        ] {
            assert!(is_quantity(ok), "{ok}");
        }
        // As apimachinery's parser reads them (not its error message's regular expression):
        // an empty number is 0, so "Gi", "." and "+" are quantities.
        for bad in ["", "lots", "1.5.5", "1 Gi", "1gi", "1e", "1e1.5", "1Ki1", " 1"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }
}
