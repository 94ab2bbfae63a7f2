//! What the apiserver converts on the way in, before a written object is validated, owned or
//! stored: a Secret's `stringData` is merged into `data`, base64-encoded, and never stored or
//! served (a Secret written with `stringData: {pw: hunter2}` has `data.pw`, and its plain text
//! is nowhere to read back). One declaration per kind that converts.

use base64::Engine;
use serde_json::{Map, Value};

/// A conversion of one kind's written objects.
type Convert = fn(&mut Map<String, Value>);

/// The kinds whose written objects are converted, and how.
const CONVERSIONS: &[(&str, Convert)] = &[("Secret", secret_string_data)];

/// Converts a written `object` of `kind` as the apiserver decodes it.
pub(crate) fn on_write(kind: &str, object: &mut Map<String, Value>) {
    for (_, convert) in CONVERSIONS.iter().filter(|(k, _)| *k == kind) {
        convert(object);
    }
}

/// `stringData` into `data`: each value base64-encoded, over a `data` entry of the same key.
/// A `stringData` or `data` of the wrong shape is left as it is, for the value-type checks to
/// refuse.
fn secret_string_data(secret: &mut Map<String, Value>) {
    let plain = match secret.get("stringData") {
        None => return,
        Some(Value::Null) => Map::new(),
        Some(Value::Object(plain)) if plain.values().all(Value::is_string) => plain.clone(),
        Some(_) => return,
    };
    let data = secret.entry("data").or_insert_with(|| Value::Object(Map::new()));
    if data.is_null() {
        *data = Value::Object(Map::new());
    }
    let Value::Object(data) = data else {
        return;
    };
    for (key, value) in plain {
        let text = value.as_str().unwrap_or_default();
        let encoded = base64::engine::general_purpose::STANDARD.encode(text);
        data.insert(key, Value::String(encoded));
    }
    secret.remove("stringData");
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn converted(kind: &str, object: Value) -> Value {
        let mut object = object.as_object().unwrap().clone();
        on_write(kind, &mut object);
        Value::Object(object)
    }

    #[test]
    fn string_data_overrides_data_and_goes() {
        let out = converted(
            "Secret",
            json!({"data": {"a": "YQ==", "pw": "b2xk"}, "stringData": {"pw": "hunter2", "b": ""}}),
        );
        assert_eq!(out, json!({"data": {"a": "YQ==", "pw": "aHVudGVyMg==", "b": ""}}));
        assert_eq!(
            converted("Secret", json!({"stringData": {"k": "v"}})),
            json!({"data": {"k": "dg=="}})
        );
        assert_eq!(
            converted("Secret", json!({"stringData": null})),
            json!({"data": {}})
        );
    }

    #[test]
    fn other_kinds_and_other_shapes_are_left_alone() {
        let cm = json!({"stringData": {"k": "v"}});
        assert_eq!(converted("ConfigMap", cm.clone()), cm);
        for odd in [
            json!({"stringData": "x"}),
            json!({"stringData": {"k": 1}}),
            json!({"stringData": {"k": "v"}, "data": 7}),
        ] {
            assert_eq!(converted("Secret", odd.clone()), odd);
        }
    }
}
