//! What the apiserver converts on the way in, before a written object is validated, owned or
//! stored: a Secret's `stringData` is merged into `data`, base64-encoded, and never stored or
//! served (a Secret written with `stringData: {pw: hunter2}` has `data.pw`, and its plain text
//! is nowhere to read back); a binding's role reference and its users and groups get the RBAC
//! group, and its service accounts the core group, where they name none (the RBAC v1
//! defaults). Each kind that converts declares it ([`Strategy::on_write`](crate::Strategy::on_write)).

use base64::Engine;
use serde_json::{Map, Value};

/// `stringData` into `data`: each value base64-encoded, over a `data` entry of the same key.
/// A `stringData` or `data` of the wrong shape is left as it is, for the value-type checks to
/// refuse.
pub(super) fn secret_string_data(secret: &mut Map<String, Value>) {
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

/// The API groups a binding leaves out, as RBAC v1 defaults them: the role reference's and a
/// User's or a Group's is `rbac.authorization.k8s.io` (a ServiceAccount's is the core group,
/// which JSON leaves out).
pub(super) fn binding_api_groups(binding: &mut Map<String, Value>) {
    const RBAC: &str = "rbac.authorization.k8s.io";
    // A value of the wrong type stays, for the value-type checks to refuse.
    let unset = |o: &Map<String, Value>| match o.get("apiGroup") {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(_) => false,
    };
    if let Some(Value::Object(role_ref)) = binding.get_mut("roleRef")
        && unset(role_ref)
    {
        role_ref.insert("apiGroup".into(), Value::String(RBAC.into()));
    }
    let Some(Value::Array(subjects)) = binding.get_mut("subjects") else {
        return;
    };
    for subject in subjects.iter_mut().filter_map(Value::as_object_mut) {
        if unset(subject)
            && let Some("User" | "Group") = subject.get("kind").and_then(Value::as_str)
        {
            subject.insert("apiGroup".into(), Value::String(RBAC.into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::Registry;

    /// `object` written as a `kind` of the built-in registry.
    fn converted(kind: &str, object: Value) -> Value {
        let registry = Registry::builtin();
        let spec = registry
            .iter()
            .find(|s| s.kind == kind && s.group != "events.k8s.io")
            .expect("a built-in kind");
        let mut object = object.as_object().unwrap().clone();
        if let Some(convert) = spec.strategy.on_write {
            convert(&mut object);
        }
        Value::Object(object)
    }

    #[test]
    fn bindings_get_the_api_groups_they_leave_out() {
        for kind in ["RoleBinding", "ClusterRoleBinding"] {
            let binding = converted(
                kind,
                json!({"roleRef": {"kind": "Role", "name": "r"}, "subjects": [
                {"kind": "User", "name": "u"}, {"kind": "ServiceAccount", "name": "s"},
                {"kind": "Group", "name": "g", "apiGroup": "other"}, {"kind": "Robot", "name": "x"}]}),
            );
            assert_eq!(
                binding,
                json!({"roleRef": {"kind": "Role", "name": "r", "apiGroup": "rbac.authorization.k8s.io"}, "subjects": [
                {"kind": "User", "name": "u", "apiGroup": "rbac.authorization.k8s.io"},
                {"kind": "ServiceAccount", "name": "s"},
                {"kind": "Group", "name": "g", "apiGroup": "other"}, {"kind": "Robot", "name": "x"}]})
            );
        }
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
