//! The self-checks of `authorization.k8s.io/v1`: a `SelfSubjectAccessReview` asks whether the
//! requester may do one thing (`kubectl auth can-i VERB RESOURCE`), a
//! `SelfSubjectRulesReview` what the requester may do in a namespace (`kubectl auth can-i
//! --list`). Both are answered from the authorizer that decides requests, and stored
//! nowhere: the answer is the review with its `status` filled in.

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
        (None, Some(n)) => Attributes {
            user,
            verb: field(n, "verb").to_owned(),
            resource_request: false,
            api_group: String::new(),
            api_version: String::new(),
            resource: String::new(),
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
            path: field(n, "path").to_owned(),
        },
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
