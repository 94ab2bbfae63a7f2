//! A ConfigMap's and a Secret's data, as the apiserver validates it: every key a name a file
//! may have when the data is mounted, a ConfigMap's `data` and `binaryData` without a key in
//! common, at most 1 MiB of values; and a Secret's data decodes as base64 (else the body does
//! not decode at all).

use base64::Engine;
use serde_json::{Map, Value};

use super::field::{Errors, Path};
use super::names;

/// The most bytes a ConfigMap's or a Secret's values may hold.
const MAX_DATA_BYTES: usize = 1 << 20;

fn map<'a>(object: &'a Map<String, Value>, field: &str) -> Option<&'a Map<String, Value>> {
    object.get(field).and_then(Value::as_object)
}

/// Every key of `field` a config key; the values' sizes, by `size`, summed.
fn keys(object: &Map<String, Value>, field: &str, size: fn(&str) -> usize, errors: &mut Errors) -> usize {
    let path = Path::new(field);
    let mut total = 0;
    for (key, value) in map(object, field).into_iter().flatten() {
        errors.invalid_each(&path.key(key), key, names::config_key(key));
        total += value.as_str().map_or(0, size);
    }
    total
}

/// The bytes a base64 value stands for (what the apiserver counts of binary data).
fn decoded_len(s: &str) -> usize {
    s.trim_end_matches('=').len() * 3 / 4
}

pub(super) fn config_map(object: &Map<String, Value>, errors: &mut Errors) {
    let mut total = keys(object, "data", str::len, errors);
    if let (Some(data), Some(binary)) = (map(object, "data"), map(object, "binaryData")) {
        for key in data.keys().filter(|k| binary.contains_key(*k)) {
            errors.invalid(
                &Path::new("data").key(key),
                key.as_str(),
                "duplicate of key present in binaryData",
            );
        }
    }
    total += keys(object, "binaryData", decoded_len, errors);
    if total > MAX_DATA_BYTES {
        // The whole object is too large: the apiserver names no field.
        errors.too_long(&Path::new(""), MAX_DATA_BYTES);
    }
}

pub(super) fn secret(object: &Map<String, Value>, errors: &mut Errors) {
    if keys(object, "data", decoded_len, errors) > MAX_DATA_BYTES {
        errors.too_long(&Path::new("data"), MAX_DATA_BYTES);
    }
}

/// A Secret's data decodes as base64, as the apiserver's decoding of `[]byte` requires.
pub(super) fn decode_secret(object: &Map<String, Value>) -> Result<(), String> {
    for value in map(object, "data").into_iter().flat_map(|m| m.values()) {
        let Some(text) = value.as_str() else { continue };
        if let Err(e) = base64::engine::general_purpose::STANDARD.decode(text) {
            let at = match e {
                base64::DecodeError::InvalidByte(at, _) | base64::DecodeError::InvalidLastSymbol(at, _) => at,
                base64::DecodeError::InvalidLength(_) | base64::DecodeError::InvalidPadding => text.len(),
            };
            return Err(format!("illegal base64 data at input byte {at}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::field::shown;
    use super::*;

    #[test]
    fn keys_and_sizes() {
        let cm = json!({"data": {"ok.key": "1", "a": "x"}, "binaryData": {"a": "eA=="}});
        assert_eq!(
            shown(|e| config_map(cm.as_object().unwrap(), e)),
            ["data[a]: Invalid value: \"a\": duplicate of key present in binaryData"]
        );
        let big = json!({"data": {"a": "x".repeat(MAX_DATA_BYTES + 1)}});
        assert_eq!(
            shown(|e| config_map(big.as_object().unwrap(), e)),
            [": Too long: may not be more than 1048576 bytes"]
        );
        let s = json!({"data": {"..": "YQ=="}});
        assert_eq!(shown(|e| secret(s.as_object().unwrap(), e)).len(), 1);
    }

    #[test]
    fn secret_data_is_base64() {
        let ok = json!({"data": {"a": "aHVudGVyMg==", "b": ""}});
        assert_eq!(decode_secret(ok.as_object().unwrap()), Ok(()));
        let bad = json!({"data": {"a": "not base64!"}});
        assert_eq!(
            decode_secret(bad.as_object().unwrap()).unwrap_err(),
            "illegal base64 data at input byte 3"
        );
    }
}
