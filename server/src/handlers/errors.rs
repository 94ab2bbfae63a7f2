//! Every error a request can meet, mapped to its `metav1.Status`: the one place that decides
//! which HTTP code and reason each failure of core, a source or a codec gets, as the
//! apiserver answers them.

use serde_json::{Map, Value, json};
use watchcache_core::{CacheError, CodecError, Corrupt, Expired, SourceError};
use watchcache_encoders::{ResourceInfo, Status};

use crate::auth::Attributes;
use crate::store::stored::Refused;
use watchcache_api::mutation::yaml::YamlError;
use watchcache_api::openapi::ValueError;
use watchcache_api::validation::{self, FieldError, Refusal};

/// The Status for a cache error met reading `info`'s resource.
pub(crate) fn cache(e: &CacheError, info: &ResourceInfo) -> Status {
    match e {
        CacheError::CorruptObject(c) => corrupt_object(&c.key, &c.reason),
        CacheError::CorruptObjects { objects, more } => corrupt_list(info, objects, *more),
        CacheError::Expired(e) => expired(e),
        CacheError::ContinueExpired(_) => Status::gone(e.to_string()),
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
        // A read the source had to answer (a consistent read's revision, or a read the cache
        // could not serve) and could not: 504 with a retry, as the apiserver answers a read
        // etcd timed out on (a cluster without a leader, say).
        CacheError::Source(SourceError::Unavailable(_)) => {
            let mut s = Status::new(504, "Timeout", e.to_string());
            s.details = Some(json!({"retryAfterSeconds": 1}));
            s.retry_after = Some(1);
            s
        }
        CacheError::Source(s) => source(s, "", ""),
    }
}

/// The Status for a watcher that fell out of the history window: 410 `Expired`, sent in the
/// stream as an ERROR event (clients re-list on it).
pub(crate) fn expired(e: &Expired) -> Status {
    Status::gone(e.to_string())
}

/// The Status for a request whose body did not arrive within the request timeout: 504
/// `Timeout`, as the apiserver answers a request that outlives its timeout.
pub(crate) fn body_timeout(limit: std::time::Duration) -> Status {
    Status::new(
        504,
        "Timeout",
        format!("the request's body did not arrive within the request timeout ({limit:?})"),
    )
}

/// The Status for a request whose credentials do not verify (or that has none, where
/// anonymous requests are refused): 401, saying no more, as the apiserver answers it.
pub(crate) fn unauthorized() -> Status {
    Status::new(401, "Unauthorized", "Unauthorized")
}

/// The Status for a request the authorizer does not allow: 403 `Forbidden`, in the
/// apiserver's words (`pods "p" is forbidden: User "alice" cannot get resource "pods" in API
/// group "" in the namespace "ns"`), `reason` (the authorizer's, may be empty) after them, and
/// the group, resource (as `kind`) and name in the details.
pub(crate) fn forbidden(a: &Attributes, reason: &str) -> Status {
    let user = &a.user.name;
    let what = if !a.resource_request {
        format!("User {user:?} cannot {} path {:?}", a.verb, a.path)
    } else {
        let resource = if a.subresource.is_empty() {
            a.resource.clone()
        } else {
            format!("{}/{}", a.resource, a.subresource)
        };
        let (verb, group) = (&a.verb, &a.api_group);
        if a.namespace.is_empty() {
            format!(
                "User {user:?} cannot {verb} resource {resource:?} in API group {group:?} at the cluster scope"
            )
        } else {
            format!(
                "User {user:?} cannot {verb} resource {resource:?} in API group {group:?} in the namespace {:?}",
                a.namespace
            )
        }
    };
    // Nothing in the message may read as HTML.
    let what = what
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let why = if reason.is_empty() {
        what
    } else {
        format!("{what}: {reason}")
    };
    let qualified = match (a.resource.as_str(), a.api_group.as_str()) {
        (resource, "") => resource.to_owned(),
        (resource, group) => format!("{resource}.{group}"),
    };
    let message = match (qualified.as_str(), a.name.as_str()) {
        ("", _) => format!("forbidden: {why}"),
        (q, "") => format!("{q} is forbidden: {why}"),
        (q, name) => format!("{q} {name:?} is forbidden: {why}"),
    };
    let mut details = Map::new();
    for (key, value) in [("name", &a.name), ("group", &a.api_group), ("kind", &a.resource)] {
        if !value.is_empty() {
            details.insert(key.to_owned(), json!(value));
        }
    }
    let mut s = Status::new(403, "Forbidden", message);
    if !details.is_empty() {
        s.details = Some(Value::Object(details));
    }
    s
}

/// 403 for a write the storage refuses (not the authorizer): `roles.rbac.authorization.k8s.io
/// "name" is forbidden: why`, as the apiserver's `NewForbidden`.
pub(crate) fn forbidden_write(info: &ResourceInfo, name: &str, why: &str) -> Status {
    let group = info.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let qualified = match group {
        "" => info.resource.clone(),
        g => format!("{}.{g}", info.resource),
    };
    let mut s = Status::new(
        403,
        "Forbidden",
        format!("{qualified} {name:?} is forbidden: {why}"),
    );
    s.details = Some(json!({"name": name, "group": group, "kind": info.resource}));
    s
}

/// The Status for a source error met on `name` of `resource`.
pub(crate) fn source(e: &SourceError, resource: &str, name: &str) -> Status {
    match e {
        SourceError::NotFound(_) => Status::not_found(resource, name),
        SourceError::AlreadyExists(_) => Status::already_exists(resource, name),
        SourceError::Conflict { .. } => Status::conflict(resource, name),
        SourceError::Compacted { .. } => Status::gone(e.to_string()),
        // etcd refuses a request over its --max-request-bytes with these words; whether the
        // object was too large for it or for the server's own bound, the answer is the same.
        SourceError::Unavailable(m) if m.contains(ETCD_TOO_LARGE) => too_large(),
        SourceError::Unavailable(_) => Status::unavailable(e.to_string()),
    }
}

/// The Status for a create whose generated names were all taken: 409 `AlreadyExists`, with a
/// retry, as the apiserver answers when its name generator keeps colliding.
pub(crate) fn generated_name_taken(resource: &str, name: &str) -> Status {
    let mut s = Status::already_exists(resource, name);
    s.message = format!(
        "{resource} \"{name}\" already exists, the server was not able to generate a unique name for the object"
    );
    s.details = Some(json!({"name": name, "kind": resource, "retryAfterSeconds": 1}));
    s
}

/// The Status for object `name` of `info`'s kind that its validation refuses, as the apiserver
/// answers: 400 when it does not even decode into its kind (`Pod in version "v1" cannot be
/// handled as a Pod: …`), else 422 `Invalid` with a cause per field. A PATCH (other than an
/// apply) whose result does not decode is 422 on the field `patch`, as the apiserver's patcher
/// reports it: `patched` is that result.
pub(crate) fn refused(
    info: &ResourceInfo,
    name: &str,
    refusal: Refusal,
    patched: Option<&Map<String, Value>>,
) -> Status {
    let (group, version) = match info.api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", info.api_version.as_str()),
    };
    match (refusal, patched) {
        (Refusal::Undecodable(why), None) => Status::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {why}",
            kind = info.kind
        )),
        (Refusal::Undecodable(why), Some(patched)) => {
            let as_json = Value::Object(patched.clone()).to_string();
            let error = FieldError {
                kind: validation::ErrorKind::Invalid,
                field: "patch".to_owned(),
                value: Value::String(as_json),
                printed: None,
                detail: why,
            };
            invalid("", "", "", &[error])
        }
        (Refusal::Invalid(errors), _) => invalid(group, &info.kind, name, &errors),
    }
}

/// 422 `Invalid` for one `field` of object `name` of `kind` in `group`: `value` refused, `why`.
pub(crate) fn invalid_field(
    kind: &str,
    group: &str,
    name: &str,
    field: &str,
    value: Value,
    why: &str,
) -> Status {
    let error = FieldError {
        kind: validation::ErrorKind::Invalid,
        field: field.to_owned(),
        value,
        printed: None,
        detail: why.to_owned(),
    };
    invalid(group, kind, name, &[error])
}

/// 422 `Invalid` for object `name` of `kind` in `group`, in apimachinery's `NewInvalid` shape:
/// `Kind "name" is invalid: <each error, once>`, a cause per error.
fn invalid(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> Status {
    let qualified = if group.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}.{group}")
    };
    let mut messages: Vec<String> = Vec::new();
    for e in errors {
        let m = e.to_string();
        if !messages.contains(&m) {
            messages.push(m);
        }
    }
    let listed = match messages.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    let causes: Vec<Value> = errors
        .iter()
        .map(|e| json!({"reason": e.kind.reason(), "message": e.body(), "field": e.field}))
        .collect();
    let mut s = Status::invalid(format!("{qualified} {} is invalid: {listed}", Value::from(name)));
    let mut details = json!({"name": name, "kind": kind, "causes": causes});
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    s.details = Some(details);
    s
}

/// What etcd says of a request over its size limit.
const ETCD_TOO_LARGE: &str = "etcdserver: request is too large";

/// An object larger than etcd takes, as the apiserver answers it: etcd's own error, passed on
/// as a 500 with no reason (kubernetes#112152 asks for a 4xx; clients and people meet this
/// one, so it is what they search for).
fn too_large() -> Status {
    Status::new(500, "", ETCD_TOO_LARGE)
}

/// The Status for an object a custom resource's schema defaults would grow past what the
/// store takes: what storing it would answer.
pub(crate) fn defaults_too_large() -> Status {
    too_large()
}

/// The apiserver's words for a body it could not decode into `kind` of `api_version`.
fn cannot_handle(kind: &str, api_version: &str, why: &dyn std::fmt::Display) -> Status {
    let version = api_version.rsplit('/').next().unwrap_or(api_version);
    Status::bad_request(format!(
        "{kind} in version {version:?} cannot be handled as a {kind}: {why}"
    ))
}

/// The Status for a request's object whose values do not fit their types: 400.
pub(crate) fn ill_typed(e: &ValueError, kind: &str, api_version: &str) -> Status {
    cannot_handle(kind, api_version, e)
}

/// The Status for an object the server will not store: too large (as etcd refuses it), or
/// one that cannot be written in protobuf (400, as a value that does not decode).
pub(crate) fn not_stored(e: &Refused, kind: &str, api_version: &str) -> Status {
    match e {
        Refused::TooLarge { .. } => too_large(),
        Refused::NoProtobuf(_) => cannot_handle(kind, api_version, e),
    }
}

/// The Status for a YAML body that is not YAML or expands past its bound: 400, `what` naming
/// the body.
pub(crate) fn yaml(e: &YamlError, what: &str) -> Status {
    Status::bad_request(format!("{what}: {e}"))
}

/// The Status for an object a request body carries that its resource's codec refuses.
pub(crate) fn invalid_object(e: &CodecError) -> Status {
    Status::invalid(e.to_string())
}

/// The Status for a stored object the codec cannot encode or decode (a server fault); for a
/// corrupt one, the error naming it.
pub(crate) fn codec(e: &CodecError) -> Status {
    match e {
        CodecError::Corrupt { key, reason } => corrupt_object(key, reason),
        e => Status::internal(e.to_string()),
    }
}

/// The Status for a read of one corrupt object (KEP-3926): 500, naming its storage key, as
/// the apiserver reports the storage layer's corrupt-object error.
pub(crate) fn corrupt_object(key: &str, reason: &str) -> Status {
    let message = format!(
        "StorageError: corrupt object, Code: 7, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: {reason}"
    );
    let mut s = Status::internal(format!("Internal error occurred: {message}"));
    s.details = Some(json!({"causes": [{"message": message}]}));
    s
}

/// The Status for a LIST that would include corrupt objects: 500 `StorageReadError`, one cause
/// per object naming its storage key (and one saying the list is cut, past the limit), as the
/// apiserver reports them.
fn corrupt_list(info: &ResourceInfo, objects: &[Corrupt], more: bool) -> Status {
    let group = info.api_version.split_once('/').map_or("", |(g, _)| g);
    let qualified = if group.is_empty() {
        info.resource.clone()
    } else {
        format!("{}.{group}", info.resource)
    };
    let mut causes: Vec<Value> = objects
        .iter()
        .map(|c| {
            json!({
                "reason": "UnexpectedServerResponse",
                "field": c.key,
                "message": format!("key: {}, revision: {}: object not decodable: {}", c.key, c.revision, c.reason),
            })
        })
        .collect();
    if more {
        causes.push(json!({"reason": "TooMany", "message": "too many errors, the list is truncated"}));
    }
    let mut s = Status::new(
        500,
        "StorageReadError",
        format!("failed to read one or more {qualified} from the storage"),
    );
    s.details = Some(json!({"group": group, "kind": info.resource, "name": "list", "causes": causes}));
    s
}

/// The Status for a strategic merge patch of a custom resource (or its `/status` or `/scale`):
/// 415, as the apiserver answers, since their lists merge by their schema, which a strategic
/// patch's directives do not speak (kubectl falls back to a merge patch).
pub(crate) fn no_strategic_merge() -> Status {
    Status::new(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: \
         application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::Value;
    use watchcache_core::Revision;

    use super::*;

    fn body(s: &Status) -> Value {
        serde_json::from_slice(&s.to_json()).unwrap()
    }

    #[test]
    fn forbidden_is_in_the_apiservers_words() {
        use std::sync::Arc;

        use crate::auth::{UserInfo, attributes};
        let alice = Arc::new(UserInfo::authenticated("alice", "", vec![]));
        let forbidden_on = |user: &Arc<UserInfo>, method: &str, path: &str| {
            forbidden(&attributes(user.clone(), method, path, None).unwrap(), "")
        };
        let s = forbidden_on(&alice, "GET", "/api/v1/namespaces/kube-system/pods");
        assert_eq!((s.code, s.reason), (403, "Forbidden"));
        assert_eq!(
            s.message,
            r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "kube-system""#
        );
        assert_eq!(body(&s)["details"], serde_json::json!({"kind": "pods"}));
        let s = forbidden_on(&alice, "GET", "/api/v1/nodes");
        assert_eq!(
            s.message,
            r#"nodes is forbidden: User "alice" cannot list resource "nodes" in API group "" at the cluster scope"#
        );
        let s = forbidden_on(&alice, "GET", "/api/v1/namespaces/ns/pods/x/status");
        assert_eq!(
            s.message,
            r#"pods "x" is forbidden: User "alice" cannot get resource "pods/status" in API group "" in the namespace "ns""#
        );
        assert_eq!(
            body(&s)["details"],
            serde_json::json!({"name": "x", "kind": "pods"})
        );
        let s = forbidden_on(
            &alice,
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
        );
        assert_eq!(
            s.message,
            r#"leases.coordination.k8s.io "l" is forbidden: User "alice" cannot update resource "leases" in API group "coordination.k8s.io" in the namespace "ns""#
        );
        assert_eq!(
            body(&s)["details"],
            serde_json::json!({"name": "l", "group": "coordination.k8s.io", "kind": "leases"})
        );
        let s = forbidden_on(&Arc::new(UserInfo::anonymous()), "GET", "/metrics");
        assert_eq!(
            s.message,
            r#"forbidden: User "system:anonymous" cannot get path "/metrics""#
        );
        assert_eq!(s.details, None);
        let a = attributes(alice, "GET", "/<b>", None).unwrap();
        assert_eq!(
            forbidden(&a, "RBAC: role not found").message,
            r#"forbidden: User "alice" cannot get path "/&lt;b&gt;": RBAC: role not found"#
        );
        let s = unauthorized();
        assert_eq!(
            (s.code, s.reason, s.message.as_str()),
            (401, "Unauthorized", "Unauthorized")
        );
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
            (
                CacheError::ContinueExpired(Expired {
                    requested: r(1),
                    oldest: r(5),
                }),
                410,
                "Expired",
            ),
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
                504,
                "Timeout",
            ),
        ];
        let pods = ResourceInfo::new("pods", "Pod", "v1");
        for (e, code, reason) in cases {
            let s = cache(&e, &pods);
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
    fn corrupt_objects_are_named_as_the_apiserver_names_them() {
        let corrupt = |key: &str| Corrupt {
            key: key.into(),
            revision: Revision::new(7),
            reason: "not json".into(),
        };
        let leases = ResourceInfo::new("leases", "Lease", "coordination.k8s.io/v1");
        let e = CacheError::CorruptObjects {
            objects: vec![corrupt("/registry/leases/ns/a"), corrupt("/registry/leases/ns/b")],
            more: true,
        };
        let b = body(&cache(&e, &leases));
        assert_eq!(
            (b["code"].as_u64(), b["reason"].as_str()),
            (Some(500), Some("StorageReadError"))
        );
        assert_eq!(
            b["message"],
            "failed to read one or more leases.coordination.k8s.io from the storage"
        );
        assert_eq!(b["details"]["group"], "coordination.k8s.io");
        assert_eq!(b["details"]["name"], "list");
        let causes = b["details"]["causes"].as_array().unwrap();
        assert_eq!(causes[1]["field"], "/registry/leases/ns/b");
        assert_eq!(causes[2]["reason"], "TooMany");
        let one = body(&cache(
            &CacheError::CorruptObject(corrupt("/registry/leases/ns/a")),
            &leases,
        ));
        assert_eq!(
            (one["code"].as_u64(), one["reason"].as_str()),
            (Some(500), Some("InternalError"))
        );
        assert!(
            one["message"]
                .as_str()
                .unwrap()
                .contains("corrupt object, Code: 7, Key: /registry/leases/ns/a")
        );
    }

    #[test]
    fn too_large_resource_version_carries_its_cause_and_retry() {
        let s = cache(
            &CacheError::TooLargeResourceVersion {
                requested: Revision::new(9),
                current: Revision::new(5),
            },
            &ResourceInfo::new("pods", "Pod", "v1"),
        );
        let b = body(&s);
        assert_eq!(b["message"], "Too large resource version: 9, current: 5");
        assert_eq!(b["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
        assert_eq!(b["details"]["retryAfterSeconds"], 1);
        assert_eq!(s.retry_after, Some(1));
    }

    #[test]
    fn write_errors_name_the_object() {
        let nf = body(&source(&SourceError::NotFound("k".into()), "pods", "web"));
        assert_eq!(
            (nf["code"].as_u64(), nf["reason"].as_str()),
            (Some(404), Some("NotFound"))
        );
        assert_eq!(nf["message"], "pods \"web\" not found");
        assert_eq!(nf["details"]["name"], "web");
        let ae = body(&source(&SourceError::AlreadyExists("k".into()), "pods", "web"));
        assert_eq!(
            (ae["code"].as_u64(), ae["reason"].as_str()),
            (Some(409), Some("AlreadyExists"))
        );
        let c = SourceError::Conflict {
            key: "k".into(),
            current: Revision::new(3),
        };
        let cf = body(&source(&c, "pods", "web"));
        assert_eq!(
            (cf["code"].as_u64(), cf["reason"].as_str()),
            (Some(409), Some("Conflict"))
        );
        let gone = source(
            &SourceError::Compacted {
                compact_revision: Revision::new(4),
            },
            "pods",
            "",
        );
        assert_eq!((gone.code, gone.reason), (410, "Expired"));
    }

    #[test]
    fn too_large_objects_are_answered_as_the_apiserver_answers_etcds_refusal() {
        let ours = not_stored(&Refused::TooLarge { size: 2 << 20 }, "ConfigMap", "v1");
        let etcds = source(
            &SourceError::Unavailable(
                "grpc request error: status: InvalidArgument, message: \"etcdserver: request is too large\""
                    .into(),
            ),
            "configmaps",
            "c",
        );
        for s in [&ours, &etcds] {
            assert_eq!((s.code, s.reason, s.message.as_str()), (500, "", ETCD_TOO_LARGE));
        }
        let down = source(&SourceError::Unavailable("no leader".into()), "configmaps", "c");
        assert_eq!(down.code, 503);
        let ill = ill_typed(
            &ValueError("json: cannot unmarshal number".into()),
            "Lease",
            "coordination.k8s.io/v1",
        );
        assert_eq!(ill.code, 400);
        assert_eq!(
            ill.message,
            "Lease in version \"v1\" cannot be handled as a Lease: json: cannot unmarshal number"
        );
    }

    #[test]
    fn codec_errors_are_invalid_for_request_bodies_and_internal_for_stored_objects() {
        let e = CodecError::MissingName;
        assert_eq!(
            (invalid_object(&e).code, invalid_object(&e).reason),
            (422, "Invalid")
        );
        assert_eq!((codec(&e).code, codec(&e).reason), (500, "InternalError"));
    }
}
