//! `metav1.Status` bodies with the apiserver's codes and reasons: a constructor per kind of
//! failure and the JSON body. Which error becomes which Status is decided by the server, in
//! one place.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

/// A `metav1.Status` failure: the HTTP code, the reason and the message.
#[derive(Clone, Debug, PartialEq)]
pub struct Status {
    /// The HTTP status code (also the Status's `code`).
    pub code: u16,
    /// The machine-readable reason (`Expired`, `NotFound`, …).
    pub reason: &'static str,
    /// The human-readable message.
    pub message: String,
    /// `details`, when there are any.
    pub details: Option<Value>,
    /// Seconds after which to retry (also sent as `Retry-After`), when it makes sense.
    pub retry_after: Option<u64>,
}

impl Status {
    /// A failure with `code`, `reason` and `message`, no details.
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Status {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// 400 `BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Status::new(400, "BadRequest", message)
    }

    /// 404 `NotFound` for `name` of `resource` (empty name: the resource or path is unknown).
    pub fn not_found(resource: &str, name: &str) -> Self {
        let message = if name.is_empty() {
            "the server could not find the requested resource".to_owned()
        } else {
            format!("{resource} \"{name}\" not found")
        };
        let mut s = Status::new(404, "NotFound", message);
        if !name.is_empty() {
            s.details = Some(json!({"name": name, "kind": resource}));
        }
        s
    }

    /// 405 `MethodNotAllowed`.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Status::new(405, "MethodNotAllowed", message)
    }

    /// 409 `AlreadyExists`.
    pub fn already_exists(resource: &str, name: &str) -> Self {
        let mut s = Status::new(
            409,
            "AlreadyExists",
            format!("{resource} \"{name}\" already exists"),
        );
        s.details = Some(json!({"name": name, "kind": resource}));
        s
    }

    /// 409 `Conflict` for an update against a stale resourceVersion.
    pub fn conflict(resource: &str, name: &str) -> Self {
        let mut s = Status::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again"
            ),
        );
        s.details = Some(json!({"name": name, "kind": resource}));
        s
    }

    /// 410 `Expired`.
    pub fn gone(message: impl Into<String>) -> Self {
        Status::new(410, "Expired", message)
    }

    /// 422 `Invalid`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Status::new(422, "Invalid", message)
    }

    /// 422 `Invalid` for object `name` of `kind`, with one `FieldValueInvalid` cause per
    /// `(field, value, why)`, in the apiserver's shape: the message is
    /// `Kind "name" is invalid: field: Invalid value: "value": why, …`.
    pub fn invalid_fields(kind: &str, name: &str, errors: &[(&str, &str, &str)]) -> Self {
        let cause = |(field, value, why): &(&str, &str, &str)| {
            let message = format!("Invalid value: {}: {why}", Value::from(*value));
            (
                format!("{field}: {message}"),
                json!({"reason": "FieldValueInvalid", "message": message, "field": field}),
            )
        };
        let (messages, causes): (Vec<String>, Vec<Value>) = errors.iter().map(cause).unzip();
        let listed = match messages.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let mut s = Status::new(
            422,
            "Invalid",
            format!("{kind} {} is invalid: {listed}", Value::from(name)),
        );
        s.details = Some(json!({"name": name, "kind": kind, "causes": causes}));
        s
    }

    /// 429 `TooManyRequests` with `Retry-After`.
    pub fn too_many_requests(message: impl Into<String>, retry_after: Duration) -> Self {
        let secs = retry_after.as_secs().max(1);
        let mut s = Status::new(429, "TooManyRequests", message);
        s.details = Some(json!({"retryAfterSeconds": secs}));
        s.retry_after = Some(secs);
        s
    }

    /// 500 `InternalError`.
    pub fn internal(message: impl Into<String>) -> Self {
        Status::new(500, "InternalError", message)
    }

    /// 503 `ServiceUnavailable`.
    pub fn unavailable(message: impl Into<String>) -> Self {
        let mut s = Status::new(503, "ServiceUnavailable", message);
        s.retry_after = Some(1);
        s
    }

    /// The body, byte for byte as the apiserver writes it: its fields in the order of Go's
    /// `metav1.Status` (`kind, apiVersion, metadata, status, message, reason, details, code`;
    /// within `details`, `name, group, kind, uid, causes, retryAfterSeconds`; within a cause,
    /// `reason, message, field`), strings escaped as Go's encoder escapes them (`<`, `>` and
    /// `&` as `\u003c`, `\u003e`, `\u0026`). Without the newline a response body ends with
    /// ([`to_body`](Self::to_body)), so that a watch frame can embed it.
    pub fn to_json(&self) -> Bytes {
        let mut out = Vec::with_capacity(160 + self.message.len());
        out.extend_from_slice(
            br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"#,
        );
        go_string(&mut out, &self.message);
        if !self.reason.is_empty() {
            out.extend_from_slice(br#","reason":"#);
            go_string(&mut out, self.reason);
        }
        if let Some(d) = &self.details {
            out.extend_from_slice(br#","details":"#);
            go_value(&mut out, d, DETAILS);
        }
        out.extend_from_slice(br#","code":"#);
        crate::write::put_u64(&mut out, u64::from(self.code));
        out.push(b'}');
        Bytes::from(out)
    }

    /// The body of a response: [`to_json`](Self::to_json) and a newline, as every apiserver
    /// JSON body ends.
    pub fn to_body(&self) -> Bytes {
        let mut out = Vec::from(self.to_json());
        out.push(b'\n');
        Bytes::from(out)
    }

    /// The body of a `Success` Status (an eviction's answer, a DELETE that answers no
    /// object), as the apiserver writes it: the fields of [`to_json`](Self::to_json)'s order,
    /// `details` and `code` left out when unset, and a newline.
    pub fn success_body(code: Option<u16>, details: Option<&Value>) -> Bytes {
        let mut out = Vec::with_capacity(96);
        out.extend_from_slice(br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success""#);
        if let Some(d) = details {
            out.extend_from_slice(br#","details":"#);
            go_value(&mut out, d, DETAILS);
        }
        if let Some(code) = code {
            out.extend_from_slice(br#","code":"#);
            crate::write::put_u64(&mut out, u64::from(code));
        }
        out.extend_from_slice(b"}\n");
        Bytes::from(out)
    }

    /// The `meta.k8s.io/v1` Status message, without an envelope (protobuf watch ERROR frames).
    pub fn to_protobuf(&self) -> Vec<u8> {
        let value: serde_json::Value = serde_json::from_slice(&self.to_json()).unwrap_or_default();
        let object = value.as_object().cloned().unwrap_or_default();
        // A Status's JSON is built above from strings, numbers and the details object of
        // another Status: it fits the schema.
        crate::protobuf::encode_json("io.k8s.apimachinery.pkg.apis.meta.v1.Status", &object)
            .unwrap_or_default()
    }
}

/// The order of `metav1.StatusDetails`' fields.
const DETAILS: &[&str] = &["name", "group", "kind", "uid", "causes", "retryAfterSeconds"];
/// The order of `metav1.StatusCause`'s fields.
const CAUSE: &[&str] = &["reason", "message", "field"];

/// Appends `s` as Go's `encoding/json` writes a string: HTML characters and the line and
/// paragraph separators escaped.
fn go_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            // As Go writes them since 1.22.
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.extend_from_slice(format!("\\u{:04x}", u32::from(c)).as_bytes());
            }
            c if (c as u32) < 0x20 => out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes()),
            c => {
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

/// Appends `v`: an object's fields in `order` first (the rest after, in key order), a
/// `causes` list's objects in a cause's order.
fn go_value(out: &mut Vec<u8>, v: &Value, order: &[&str]) {
    match v {
        Value::String(s) => go_string(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                go_value(out, item, order);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by_key(|k| {
                (
                    order.iter().position(|o| o == k).unwrap_or(order.len()),
                    k.as_str(),
                )
            });
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                go_string(out, k);
                out.push(b':');
                let inner = if k == "causes" { CAUSE } else { &[] };
                go_value(out, &map[k], inner);
            }
            out.push(b'}');
        }
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_success_body_is_in_gos_order_with_a_newline() {
        assert_eq!(
            &Status::success_body(Some(201), None)[..],
            &b"{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Success\",\"code\":201}\n"[..]
        );
        let details = serde_json::json!({"kind": "pods", "name": "a<b"});
        let mut escaped = Vec::new();
        go_string(&mut escaped, "\u{8}\u{c}\u{1}");
        assert_eq!(escaped, b"\"\\b\\f\\u0001\"");
        assert_eq!(
            &Status::success_body(None, Some(&details))[..],
            &b"{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Success\",\"details\":{\"name\":\"a\\u003cb\",\"kind\":\"pods\"}}\n"[..]
        );
    }

    fn body(s: &Status) -> Value {
        serde_json::from_slice(&s.to_json()).unwrap()
    }

    #[test]
    fn a_status_body_is_written_byte_for_byte_as_the_apiserver_writes_it() {
        let mut s = Status::new(
            409,
            "Conflict",
            "Operation cannot be fulfilled on configmaps \"a<b>&\": the object has been modified",
        );
        s.details = Some(
            json!({"causes": [{"field": "f", "message": "m", "reason": "R"}], "kind": "configmaps", "name": "a"}),
        );
        assert_eq!(
            &s.to_body()[..],
            &br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Operation cannot be fulfilled on configmaps \"a\u003cb\u003e\u0026\": the object has been modified","reason":"Conflict","details":{"name":"a","kind":"configmaps","causes":[{"reason":"R","message":"m","field":"f"}]},"code":409}
"#[..],
            "{}",
            String::from_utf8_lossy(&s.to_body())
        );
        // The same JSON, parsed: nothing lost in the writing.
        let parsed: Value = serde_json::from_slice(&s.to_json()).unwrap();
        assert_eq!(parsed["message"], s.message);
        assert_eq!(parsed["details"]["causes"][0]["field"], "f");
    }

    #[test]
    fn a_status_body_has_the_apiserver_shape() {
        let s = Status::gone("too old resource version: 1 (5)");
        let b = body(&s);
        assert_eq!(
            (b["kind"].as_str(), b["apiVersion"].as_str(), b["status"].as_str()),
            (Some("Status"), Some("v1"), Some("Failure"))
        );
        assert_eq!((s.code, b["code"].as_u64()), (410, Some(410)));
        assert_eq!(b["reason"], "Expired");
        assert_eq!(b["message"], "too old resource version: 1 (5)");
        assert!(b["metadata"].is_object());
        assert!(b.get("details").is_none());
    }

    #[test]
    fn invalid_fields_have_one_cause_each_in_the_apiserver_shape() {
        let s = Status::invalid_fields("ConfigMap", "A", &[("metadata.name", "A", "not lowercase")]);
        let b = body(&s);
        assert_eq!((s.code, b["reason"].as_str()), (422, Some("Invalid")));
        assert_eq!(
            b["message"],
            r#"ConfigMap "A" is invalid: metadata.name: Invalid value: "A": not lowercase"#
        );
        assert_eq!(b["details"]["kind"], "ConfigMap");
        assert_eq!(b["details"]["causes"][0]["reason"], "FieldValueInvalid");
        assert_eq!(b["details"]["causes"][0]["field"], "metadata.name");
        let two = Status::invalid_fields("Pod", "p", &[("a", "1", "x"), ("b", "2", "y")]);
        assert!(
            two.message
                .ends_with(r#"[a: Invalid value: "1": x, b: Invalid value: "2": y]"#),
            "{}",
            two.message
        );
    }

    #[test]
    fn object_errors_name_the_object() {
        let nf = body(&Status::not_found("pods", "web"));
        assert_eq!(
            (nf["code"].as_u64(), nf["reason"].as_str()),
            (Some(404), Some("NotFound"))
        );
        assert_eq!(nf["message"], "pods \"web\" not found");
        assert_eq!(nf["details"]["name"], "web");
        let ae = body(&Status::already_exists("pods", "web"));
        assert_eq!(
            (ae["code"].as_u64(), ae["reason"].as_str()),
            (Some(409), Some("AlreadyExists"))
        );
        let cf = body(&Status::conflict("pods", "web"));
        assert_eq!(
            (cf["code"].as_u64(), cf["reason"].as_str()),
            (Some(409), Some("Conflict"))
        );
        let tm = Status::too_many_requests("wait", Duration::from_millis(10));
        assert_eq!((tm.code, tm.retry_after), (429, Some(1)));
    }
}
