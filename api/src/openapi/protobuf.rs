//! `/openapi/v2` in protobuf: the Swagger 2.0 document as gnostic's `openapi.v2.Document`
//! message, the only form client-go before 1.29 reads (kubectl 1.27 and 1.28 validate, apply
//! and explain from it).
//!
//! The document is transcoded from its JSON form: each JSON field goes to the message field
//! gnostic's `OpenAPIv2.proto` gives it, written with prost's wire-format primitives. Values
//! gnostic keeps as `Any` (defaults, enums, examples, vendor extensions) carry their YAML text,
//! which for these values is their JSON text. Fields this server's documents never contain
//! (security, tags, external docs, XML) are not transcoded.

use prost::encoding::{WireType, encode_key, encode_varint};
use serde_json::{Map, Value};

/// Encodes a Swagger 2.0 JSON document as `openapi.v2.Document`.
pub(super) fn document(doc: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    string(&mut out, 1, doc.get("swagger"));
    if let Some(info) = doc.get("info") {
        let mut m = Vec::new();
        string(&mut m, 1, info.get("title"));
        string(&mut m, 2, info.get("version"));
        message(&mut out, 2, &m);
    }
    if let Some(Value::Object(paths)) = doc.get("paths") {
        let mut m = Vec::new();
        for (name, item) in paths {
            named(&mut m, 2, name, &path_item(item));
        }
        message(&mut out, 8, &m);
    }
    if let Some(Value::Object(defs)) = doc.get("definitions") {
        message(&mut out, 9, &named_schemas(defs));
    }
    out
}

fn path_item(item: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    for (verb, tag) in [("get", 2), ("put", 3), ("post", 4), ("delete", 5), ("patch", 8)] {
        if let Some(op) = item.get(verb) {
            message(&mut out, tag, &operation(op));
        }
    }
    for p in array(item.get("parameters")) {
        message(&mut out, 9, &parameters_item(p));
    }
    extensions(&mut out, 10, item);
    out
}

fn operation(op: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    string(&mut out, 3, op.get("description"));
    string(&mut out, 5, op.get("operationId"));
    for p in array(op.get("produces")) {
        string(&mut out, 6, Some(p));
    }
    for c in array(op.get("consumes")) {
        string(&mut out, 7, Some(c));
    }
    for p in array(op.get("parameters")) {
        message(&mut out, 8, &parameters_item(p));
    }
    if let Some(Value::Object(responses)) = op.get("responses") {
        let mut m = Vec::new();
        for (code, response) in responses {
            let mut r = Vec::new();
            string(&mut r, 1, response.get("description"));
            if let Some(schema) = response.get("schema") {
                let mut item = Vec::new();
                message(&mut item, 1, &self::schema(schema));
                message(&mut r, 2, &item);
            }
            let mut value = Vec::new();
            message(&mut value, 1, &r);
            named(&mut m, 1, code, &value);
        }
        message(&mut out, 9, &m);
    }
    extensions(&mut out, 13, op);
    out
}

/// `ParametersItem{parameter: Parameter{body_parameter | non_body_parameter}}`.
fn parameters_item(p: &Value) -> Vec<u8> {
    let mut parameter = Vec::new();
    if p.get("in").and_then(Value::as_str) == Some("body") {
        let mut body = Vec::new();
        string(&mut body, 1, p.get("description"));
        string(&mut body, 2, p.get("name"));
        string(&mut body, 3, p.get("in"));
        boolean(&mut body, 4, p.get("required"));
        if let Some(s) = p.get("schema") {
            message(&mut body, 5, &schema(s));
        }
        message(&mut parameter, 1, &body);
    } else {
        // Query and path parameters share their first fields; they part at `type`.
        let (sub_tag, type_tag, unique_tag) = match p.get("in").and_then(Value::as_str) {
            Some("path") => (4, 5, 19),
            _ => (3, 6, 20),
        };
        let mut sub = Vec::new();
        boolean(&mut sub, 1, p.get("required"));
        string(&mut sub, 2, p.get("in"));
        string(&mut sub, 3, p.get("description"));
        string(&mut sub, 4, p.get("name"));
        string(&mut sub, type_tag, p.get("type"));
        boolean(&mut sub, unique_tag, p.get("uniqueItems"));
        let mut non_body = Vec::new();
        message(&mut non_body, sub_tag, &sub);
        message(&mut parameter, 2, &non_body);
    }
    let mut out = Vec::new();
    message(&mut out, 1, &parameter);
    out
}

fn named_schemas(map: &Map<String, Value>) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, s) in map {
        named(&mut out, 1, name, &schema(s));
    }
    out
}

/// `openapi.v2.Schema`.
fn schema(s: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    string(&mut out, 1, s.get("$ref"));
    string(&mut out, 2, s.get("format"));
    string(&mut out, 3, s.get("title"));
    string(&mut out, 4, s.get("description"));
    if let Some(d) = s.get("default") {
        message(&mut out, 5, &any(d));
    }
    for (field, tag) in [("multipleOf", 6), ("maximum", 7), ("minimum", 9)] {
        if let Some(n) = s.get(field).and_then(Value::as_f64) {
            encode_key(tag, WireType::SixtyFourBit, &mut out);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
    boolean(&mut out, 8, s.get("exclusiveMaximum"));
    boolean(&mut out, 10, s.get("exclusiveMinimum"));
    for (field, tag) in [
        ("maxLength", 11),
        ("minLength", 12),
        ("maxItems", 14),
        ("minItems", 15),
        ("maxProperties", 17),
        ("minProperties", 18),
    ] {
        if let Some(n) = s.get(field).and_then(Value::as_i64) {
            encode_key(tag, WireType::Varint, &mut out);
            encode_varint(n as u64, &mut out);
        }
    }
    string(&mut out, 13, s.get("pattern"));
    boolean(&mut out, 16, s.get("uniqueItems"));
    for r in array(s.get("required")) {
        string(&mut out, 19, Some(r));
    }
    for e in array(s.get("enum")) {
        message(&mut out, 20, &any(e));
    }
    match s.get("additionalProperties") {
        Some(Value::Bool(b)) => {
            let mut m = Vec::new();
            boolean(&mut m, 2, Some(&Value::Bool(*b)));
            message(&mut out, 21, &m);
        }
        Some(a @ Value::Object(_)) => {
            let mut m = Vec::new();
            message(&mut m, 1, &schema(a));
            message(&mut out, 21, &m);
        }
        _ => {}
    }
    match s.get("type") {
        Some(t @ Value::String(_)) => {
            let mut m = Vec::new();
            string(&mut m, 1, Some(t));
            message(&mut out, 22, &m);
        }
        Some(Value::Array(types)) => {
            let mut m = Vec::new();
            for t in types {
                string(&mut m, 1, Some(t));
            }
            message(&mut out, 22, &m);
        }
        _ => {}
    }
    match s.get("items") {
        Some(Value::Array(items)) => {
            let mut m = Vec::new();
            for i in items {
                message(&mut m, 1, &schema(i));
            }
            message(&mut out, 23, &m);
        }
        Some(i @ Value::Object(_)) => {
            let mut m = Vec::new();
            message(&mut m, 1, &schema(i));
            message(&mut out, 23, &m);
        }
        _ => {}
    }
    for a in array(s.get("allOf")) {
        message(&mut out, 24, &schema(a));
    }
    if let Some(Value::Object(properties)) = s.get("properties") {
        message(&mut out, 25, &named_schemas(properties));
    }
    boolean(&mut out, 27, s.get("readOnly"));
    if let Some(e) = s.get("example") {
        message(&mut out, 30, &any(e));
    }
    extensions(&mut out, 31, s);
    out
}

/// The `x-` fields of `v` as `NamedAny`s under `tag`.
fn extensions(out: &mut Vec<u8>, tag: u32, v: &Value) {
    let Some(m) = v.as_object() else {
        return;
    };
    for (k, value) in m.iter().filter(|(k, _)| k.starts_with("x-")) {
        named(out, tag, k, &any(value));
    }
}

/// `Any{yaml}`: JSON text is YAML.
fn any(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    string(&mut out, 2, Some(&Value::String(v.to_string())));
    out
}

/// A `Named…{name, value}` entry under `tag`.
fn named(out: &mut Vec<u8>, tag: u32, name: &str, value: &[u8]) {
    let mut m = Vec::new();
    string(&mut m, 1, Some(&Value::String(name.to_owned())));
    message(&mut m, 2, value);
    message(out, tag, &m);
}

fn array(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn string(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) {
    if let Some(s) = v.and_then(Value::as_str).filter(|s| !s.is_empty()) {
        message(out, tag, s.as_bytes());
    }
}

fn boolean(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) {
    if v.and_then(Value::as_bool) == Some(true) {
        encode_key(tag, WireType::Varint, out);
        encode_varint(1, out);
    }
}

/// A length-delimited field: a string, bytes or an encoded message.
fn message(out: &mut Vec<u8>, tag: u32, bytes: &[u8]) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn fields_go_to_gnostics_numbers() {
        let doc = json!({"swagger": "2.0", "info": {"title": "T", "version": "v"}});
        // swagger = 1 ("2.0"), info = 2 {title = 1, version = 2}.
        assert_eq!(
            document(&doc),
            [0x0a, 3, b'2', b'.', b'0', 0x12, 6, 0x0a, 1, b'T', 0x12, 1, b'v']
        );
        let s = schema(&json!({"type": "string", "x-a": true}));
        // type = 22 {value = 1}; vendor_extension = 31 {name = 1, value = 2 {yaml = 2}}.
        assert_eq!(
            s,
            [
                0xb2, 0x01, 8, 0x0a, 6, b's', b't', b'r', b'i', b'n', b'g', //
                0xfa, 0x01, 13, 0x0a, 3, b'x', b'-', b'a', 0x12, 6, 0x12, 4, b't', b'r', b'u', b'e'
            ]
        );
    }
}
