//! `metav1.Status` bodies with the apiserver's codes and reasons, one function per error
//! source, so that every error a request can meet maps to exactly one Status.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use watchcache_core::{CacheError, SourceError};

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
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
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

    /// The Status for a cache error, as the apiserver answers it.
    pub fn from_cache_error(e: &CacheError) -> Self {
        match e {
            CacheError::Expired(_) => Status::gone(e.to_string()),
            CacheError::TooLargeResourceVersion { .. } => {
                let mut s = Status::new(504, "Timeout", e.to_string());
                s.details = Some(json!({
                    "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                    "retryAfterSeconds": 1,
                }));
                s.retry_after = Some(1);
                s
            }
            CacheError::InvalidContinue(_) | CacheError::InvalidRequest(_) | CacheError::Selector(_) => {
                Status::bad_request(e.to_string())
            }
            CacheError::NotReady { retry_after } => Status::too_many_requests(e.to_string(), *retry_after),
            CacheError::Source(s) => Status::from_source_error(s, "", ""),
        }
    }

    /// The Status for a source error met on `name` of `resource`.
    pub fn from_source_error(e: &SourceError, resource: &str, name: &str) -> Self {
        match e {
            SourceError::NotFound(_) => Status::not_found(resource, name),
            SourceError::AlreadyExists(_) => Status::already_exists(resource, name),
            SourceError::Conflict { .. } => Status::conflict(resource, name),
            SourceError::Compacted { .. } => Status::gone(e.to_string()),
            SourceError::Unavailable(_) => Status::unavailable(e.to_string()),
        }
    }

    /// The body: `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",…}`.
    pub fn to_json(&self) -> Bytes {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        Bytes::from(v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use watchcache_core::{Expired, Revision};

    fn body(s: &Status) -> Value {
        serde_json::from_slice(&s.to_json()).unwrap()
    }

    #[test]
    fn every_cache_error_has_the_apiservers_code_and_reason() {
        let r = Revision::new;
        let cases = [
            (
                CacheError::Expired(Expired {
                    requested: r(1),
                    oldest: r(5),
                }),
                410,
                "Expired",
            ),
            (
                CacheError::TooLargeResourceVersion {
                    requested: r(9),
                    current: r(5),
                },
                504,
                "Timeout",
            ),
            (CacheError::InvalidContinue("x".into()), 400, "BadRequest"),
            (CacheError::InvalidRequest("x".into()), 400, "BadRequest"),
            (
                CacheError::NotReady {
                    retry_after: Duration::from_secs(1),
                },
                429,
                "TooManyRequests",
            ),
            (
                CacheError::Source(SourceError::Unavailable("down".into())),
                503,
                "ServiceUnavailable",
            ),
        ];
        for (e, code, reason) in cases {
            let s = Status::from_cache_error(&e);
            let b = body(&s);
            assert_eq!(
                (b["kind"].as_str(), b["apiVersion"].as_str(), b["status"].as_str()),
                (Some("Status"), Some("v1"), Some("Failure"))
            );
            assert_eq!((s.code, b["code"].as_u64()), (code, Some(code as u64)));
            assert_eq!(b["reason"], reason);
            assert_eq!(b["message"], e.to_string());
            assert!(b["metadata"].is_object());
        }
    }

    #[test]
    fn too_large_resource_version_carries_its_cause_and_retry() {
        let s = Status::from_cache_error(&CacheError::TooLargeResourceVersion {
            requested: Revision::new(9),
            current: Revision::new(5),
        });
        let b = body(&s);
        assert_eq!(b["message"], "Too large resource version: 9, current: 5");
        assert_eq!(b["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
        assert_eq!(b["details"]["retryAfterSeconds"], 1);
        assert_eq!(s.retry_after, Some(1));
    }

    #[test]
    fn write_errors_name_the_object() {
        let nf = body(&Status::from_source_error(
            &SourceError::NotFound("k".into()),
            "pods",
            "web",
        ));
        assert_eq!(
            (nf["code"].as_u64(), nf["reason"].as_str()),
            (Some(404), Some("NotFound"))
        );
        assert_eq!(nf["message"], "pods \"web\" not found");
        assert_eq!(nf["details"]["name"], "web");
        let ae = body(&Status::from_source_error(
            &SourceError::AlreadyExists("k".into()),
            "pods",
            "web",
        ));
        assert_eq!(
            (ae["code"].as_u64(), ae["reason"].as_str()),
            (Some(409), Some("AlreadyExists"))
        );
        let c = SourceError::Conflict {
            key: "k".into(),
            current: Revision::new(3),
        };
        let cf = body(&Status::from_source_error(&c, "pods", "web"));
        assert_eq!(
            (cf["code"].as_u64(), cf["reason"].as_str()),
            (Some(409), Some("Conflict"))
        );
        let tm = Status::too_many_requests("wait", Duration::from_millis(10));
        assert_eq!((tm.code, tm.retry_after), (429, Some(1)));
    }
}
