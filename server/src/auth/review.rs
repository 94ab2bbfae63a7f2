//! The self-checks of `authorization.k8s.io/v1`: a `SelfSubjectAccessReview` asks whether the
//! requester may do one thing (`kubectl auth can-i VERB RESOURCE`), a
//! `SelfSubjectRulesReview` what the requester may do in a namespace (`kubectl auth can-i
//! --list`). Both are answered from the authorizer that decides requests, and stored
//! nowhere: the answer is the review with its `status` filled in.
//!
//! Reviews come in JSON or, as kubectl sends them, in Kubernetes protobuf: the few fields a
//! review's spec has are read from the protobuf message by their field numbers (those of
//! `k8s.io/api/authorization/v1/generated.proto`) into the JSON shape, and every other field
//! (metadata, the selectors of a resource review) is skipped. The answer is JSON, which
//! clients read by its Content-Type.

use serde_json::{Map, Value, json};
use watchcache_encoders::Status;

use k8s_openapi::api::rbac::v1::PolicyRule;

use super::authorizer::Authorizer;
use super::{Attributes, Decision, UserInfo};

/// The group and version of the reviews.
pub(crate) const GROUP_VERSION: &str = "authorization.k8s.io/v1";

fn body_object(body: &[u8], kind: &str) -> Result<Map<String, Value>, Status> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(Status::bad_request(format!("a {kind} is a JSON object"))),
        Err(e) => Err(Status::bad_request(format!(
            "{kind} in version \"v1\" cannot be handled as a {kind}: {e}"
        ))),
    }
}

fn field<'a>(o: &'a Map<String, Value>, name: &str) -> &'a str {
    o.get(name).and_then(Value::as_str).unwrap_or_default()
}

fn invalid(kind: &str, message: &str) -> Status {
    Status::invalid(format!("{kind}.authorization.k8s.io \"\" is invalid: {message}"))
}

/// A field of a review's protobuf message that is read: its number, its JSON name, and its
/// message's fields (`None`: a string).
struct Field {
    tag: u64,
    json: &'static str,
    message: Option<&'static [Field]>,
}

const fn string(tag: u64, json: &'static str) -> Field {
    Field {
        tag,
        json,
        message: None,
    }
}

const RESOURCE_ATTRIBUTES: &[Field] = &[
    string(1, "namespace"),
    string(2, "verb"),
    string(3, "group"),
    string(4, "version"),
    string(5, "resource"),
    string(6, "subresource"),
    string(7, "name"),
];
const NON_RESOURCE_ATTRIBUTES: &[Field] = &[string(1, "path"), string(2, "verb")];
const ACCESS_REVIEW_SPEC: &[Field] = &[
    Field {
        tag: 1,
        json: "resourceAttributes",
        message: Some(RESOURCE_ATTRIBUTES),
    },
    Field {
        tag: 2,
        json: "nonResourceAttributes",
        message: Some(NON_RESOURCE_ATTRIBUTES),
    },
];
const RULES_REVIEW_SPEC: &[Field] = &[string(1, "namespace")];

/// A `SelfSubjectAccessReview` in protobuf (the message in the envelope), as JSON.
pub(crate) fn access_review_from_protobuf(raw: &[u8]) -> Result<Vec<u8>, Status> {
    review_from_protobuf(raw, ACCESS_REVIEW_SPEC)
}

/// A `SelfSubjectRulesReview` in protobuf (the message in the envelope), as JSON.
pub(crate) fn rules_review_from_protobuf(raw: &[u8]) -> Result<Vec<u8>, Status> {
    review_from_protobuf(raw, RULES_REVIEW_SPEC)
}

fn review_from_protobuf(raw: &[u8], spec: &'static [Field]) -> Result<Vec<u8>, Status> {
    let review = &[Field {
        tag: 2,
        json: "spec",
        message: Some(spec),
    }];
    let object =
        read_message(raw, review).map_err(|e| Status::bad_request(format!("invalid protobuf body: {e}")))?;
    Ok(Value::Object(object).to_string().into_bytes())
}

/// Reads the fields `fields` names from the protobuf message `bytes`, skipping the others.
fn read_message(mut bytes: &[u8], fields: &[Field]) -> Result<Map<String, Value>, &'static str> {
    let mut out = Map::new();
    while !bytes.is_empty() {
        let key = varint(&mut bytes)?;
        let (tag, wire) = (key >> 3, key & 7);
        let value = match wire {
            0 => {
                varint(&mut bytes)?;
                continue;
            }
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                bytes = bytes.get(n..).ok_or("a fixed-size field is cut short")?;
                continue;
            }
            2 => {
                let len = usize::try_from(varint(&mut bytes)?).map_err(|_| "a length past memory")?;
                let value = bytes.get(..len).ok_or("a field is longer than the message")?;
                bytes = &bytes[len..];
                value
            }
            _ => return Err("a field of an unknown wire type"),
        };
        let Some(field) = fields.iter().find(|f| f.tag == tag) else {
            continue;
        };
        let json = match field.message {
            Some(inner) => Value::Object(read_message(value, inner)?),
            None => Value::String(
                std::str::from_utf8(value)
                    .map_err(|_| "a string is not UTF-8")?
                    .to_owned(),
            ),
        };
        out.insert(field.json.to_owned(), json);
    }
    Ok(out)
}

/// Reads a base-128 varint off the front of `bytes`.
fn varint(bytes: &mut &[u8]) -> Result<u64, &'static str> {
    let mut value = 0u64;
    for i in 0..10 {
        let (&b, rest) = bytes.split_first().ok_or("a varint is cut short")?;
        *bytes = rest;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("a varint is longer than ten bytes")
}

/// Answers the `SelfSubjectAccessReview` in `body` for `user`.
pub(crate) fn access_review(
    authorizer: &Authorizer,
    user: std::sync::Arc<UserInfo>,
    body: &[u8],
) -> Result<Value, Status> {
    const KIND: &str = "SelfSubjectAccessReview";
    let mut review = body_object(body, KIND)?;
    let spec = review
        .get("spec")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let resource = spec.get("resourceAttributes").and_then(Value::as_object);
    let non_resource = spec.get("nonResourceAttributes").and_then(Value::as_object);
    let attributes = match (resource, non_resource) {
        (Some(r), None) => Attributes {
            user,
            verb: field(r, "verb").to_owned(),
            resource_request: true,
            api_group: field(r, "group").to_owned(),
            api_version: field(r, "version").to_owned(),
            resource: field(r, "resource").to_owned(),
            subresource: field(r, "subresource").to_owned(),
            namespace: field(r, "namespace").to_owned(),
            name: field(r, "name").to_owned(),
            path: String::new(),
        },
        (None, Some(n)) => Attributes::non_resource(user, field(n, "verb"), field(n, "path")),
        _ => {
            return Err(invalid(
                KIND,
                "spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
            ));
        }
    };
    let mut status = Map::new();
    let reason = match authorizer.authorize(&attributes) {
        Decision::Allow(reason) => {
            status.insert("allowed".into(), json!(true));
            reason
        }
        // RBAC has no opinion on what it does not allow; it never denies outright.
        Decision::Deny(reason) => {
            status.insert("allowed".into(), json!(false));
            reason
        }
    };
    if !reason.is_empty() {
        status.insert("reason".into(), json!(reason));
    }
    finish(&mut review, KIND, Value::Object(status));
    Ok(Value::Object(review))
}

/// Answers the `SelfSubjectRulesReview` in `body` for `user`.
pub(crate) fn rules_review(authorizer: &Authorizer, user: &UserInfo, body: &[u8]) -> Result<Value, Status> {
    const KIND: &str = "SelfSubjectRulesReview";
    let mut review = body_object(body, KIND)?;
    let namespace = review
        .get("spec")
        .and_then(|s| s.get("namespace"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let rules = authorizer.rules_for(user, &namespace);
    let resource_rules: Vec<Value> = rules.resource.iter().map(resource_rule).collect();
    let non_resource_rules: Vec<Value> = rules
        .non_resource
        .iter()
        .map(
            |r| json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls.clone().unwrap_or_default()}),
        )
        .collect();
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": !rules.errors.is_empty(),
    });
    if !rules.errors.is_empty() {
        status["evaluationError"] = json!(rules.errors.join(", "));
    }
    finish(&mut review, KIND, status);
    Ok(Value::Object(review))
}

fn resource_rule(r: &PolicyRule) -> Value {
    let mut rule = json!({"verbs": r.verbs});
    for (name, value) in [
        ("apiGroups", &r.api_groups),
        ("resources", &r.resources),
        ("resourceNames", &r.resource_names),
    ] {
        if let Some(v) = value.as_ref().filter(|v| !v.is_empty()) {
            rule[name] = json!(v);
        }
    }
    rule
}

/// Makes `review` the answer: its kind and version, empty metadata, `status`.
fn finish(review: &mut Map<String, Value>, kind: &str, status: Value) {
    review.insert("kind".into(), json!(kind));
    review.insert("apiVersion".into(), json!(GROUP_VERSION));
    let metadata = review.entry("metadata").or_insert_with(|| json!({}));
    if let Some(m) = metadata.as_object_mut() {
        m.insert("creationTimestamp".into(), Value::Null);
    }
    review.entry("spec").or_insert_with(|| json!({}));
    review.insert("status".into(), status);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::auth::authorizer::AuthorizationMode;
    use crate::auth::rbac::tests::{cluster_binding, cluster_role, rule, subject, urls};
    use crate::auth::rbac::{Policy, StaticPolicy};

    fn authorizer() -> Authorizer {
        let policy = Policy {
            cluster_roles: vec![
                cluster_role("reader", vec![rule(&["get", "list"], &[""], &["pods"], &[])]),
                cluster_role("health", vec![urls(&["get"], &["/healthz"])]),
            ],
            cluster_role_bindings: vec![
                cluster_binding("r", "reader", vec![subject("User", "alice", "")]),
                cluster_binding("h", "health", vec![subject("Group", "system:authenticated", "")]),
            ],
            ..Policy::default()
        };
        Authorizer::new(AuthorizationMode::Rbac, Arc::new(StaticPolicy::new(policy)))
    }

    fn alice() -> Arc<UserInfo> {
        Arc::new(UserInfo::authenticated("alice", "", vec![]))
    }

    #[test]
    fn an_access_review_answers_for_the_requester() {
        let a = authorizer();
        let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"namespace": "ns", "verb": "list", "resource": "pods"}}});
        let answer = access_review(&a, alice(), body.to_string().as_bytes()).unwrap();
        assert_eq!(answer["status"]["allowed"], json!(true));
        assert_eq!(
            answer["status"]["reason"],
            json!(r#"RBAC: allowed by ClusterRoleBinding "r" of ClusterRole "reader" to User "alice""#)
        );
        assert_eq!(answer["spec"], body["spec"]);
        let body = json!({"spec": {"resourceAttributes": {"namespace": "ns", "verb": "delete", "resource": "pods"}}});
        let answer = access_review(&a, alice(), body.to_string().as_bytes()).unwrap();
        assert_eq!(answer["status"], json!({"allowed": false}));
        let body = json!({"spec": {"nonResourceAttributes": {"path": "/healthz", "verb": "get"}}});
        let answer = access_review(&a, alice(), body.to_string().as_bytes()).unwrap();
        assert_eq!(answer["status"]["allowed"], json!(true));
        let e = access_review(&a, alice(), br#"{"spec": {}}"#).unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(access_review(&a, alice(), b"not json").unwrap_err().code, 400);
    }

    /// A length-delimited protobuf field.
    fn len_field(tag: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![(tag << 3) | 2, u8::try_from(bytes.len()).unwrap()];
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn a_review_in_protobuf_reads_as_its_json() {
        let mut attributes = len_field(1, b"team");
        attributes.extend(len_field(2, b"list"));
        attributes.extend(len_field(5, b"pods"));
        // A field selector (8) and an unknown varint field (15) are skipped.
        attributes.extend(len_field(8, &len_field(1, b"x")));
        attributes.extend([15 << 3, 0x96, 0x01]);
        let spec = len_field(1, &attributes);
        let mut review = len_field(1, &len_field(1, b"ignored-metadata"));
        review.extend(len_field(2, &spec));
        let json = access_review_from_protobuf(&review).unwrap();
        let value: Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(
            value,
            json!({"spec": {"resourceAttributes": {"namespace": "team", "verb": "list", "resource": "pods"}}})
        );
        let answer = access_review(&authorizer(), alice(), &json).unwrap();
        assert_eq!(answer["status"]["allowed"], json!(true));
        let rules = rules_review_from_protobuf(&len_field(2, &len_field(1, b"team"))).unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&rules).unwrap(),
            json!({"spec": {"namespace": "team"}})
        );
        for bad in [
            &[0x12, 0x05, 0x0a][..],
            &[0x0b],
            &[0x80; 11],
            &[0x12, 0x02, 0x0a, 0x01],
        ] {
            assert_eq!(access_review_from_protobuf(bad).unwrap_err().code, 400, "{bad:?}");
        }
    }

    #[test]
    fn a_rules_review_lists_the_requesters_rules() {
        let a = authorizer();
        let body = json!({"spec": {"namespace": "ns"}});
        let answer = rules_review(&a, &alice(), body.to_string().as_bytes()).unwrap();
        assert_eq!(
            answer["status"],
            json!({
                "resourceRules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}],
                "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}],
                "incomplete": false,
            })
        );
        assert_eq!(answer["kind"], json!("SelfSubjectRulesReview"));
    }
}
