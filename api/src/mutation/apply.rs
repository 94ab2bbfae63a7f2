//! Server-side apply (`application/apply-patch+yaml`): a manager declares the fields it wants
//! set, and the server merges them into the live object, keeping field ownership
//! ([`fields`]).
//!
//! - The configuration is merged as a strategic merge patch would merge it (keyed lists by
//!   their keys, sets as sets, anything else replaced).
//! - A field the configuration sets to a value other than the live one, while another manager
//!   owns it, is a conflict: 409 listing each, unless `force=true`, which takes the field.
//! - A field the manager applied before and now leaves out is removed, unless another manager
//!   owns it as well.
//! - The manager's `Apply` entry in `managedFields` then holds exactly the configuration's
//!   fields.
//!
//! - The configuration is a declared object, not a patch: strategic merge directives
//!   (`$patch`, `$retainKeys`, `$setElementOrder/…`, `$deleteFromPrimitiveList/…`) are refused
//!   with 400, and a null declares nothing (it deletes nothing another manager set; a field the
//!   manager itself applied before goes as any field it stopped applying).
//!
//! Bodies are YAML, or JSON (which kubectl, client-go, kube-rs and the Python client send).

use serde_json::{Map, Value, json};
use watchcache_encoders::Status;

use crate::mutation::fields::{self, Fields, Indexed, Manager, Segment};
use crate::mutation::strategic;
use crate::mutation::yaml;

/// Parses an apply body, YAML or JSON (YAML's subset, which most clients send): an object
/// with no `managedFields` of its own.
pub fn parse(body: &[u8]) -> Result<Map<String, Value>, Status> {
    let config: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => yaml::parse(body)
            .map_err(|e| Status::bad_request(format!("the apply configuration is not YAML: {e}")))?,
    };
    let Value::Object(config) = config else {
        return Err(Status::bad_request("the apply configuration is not an object"));
    };
    let managed = config.get("metadata").and_then(|m| m.get("managedFields"));
    if managed.is_some_and(|m| !m.is_null()) {
        return Err(Status::bad_request("metadata.managedFields must be nil"));
    }
    let mut config = config;
    declared(&mut config, "")?;
    Ok(config)
}

/// The keys strategic merge reads as directives, and the prefixes of those that name a field.
const DIRECTIVES: &[&str] = &["$patch", "$retainKeys"];
const DIRECTIVE_PREFIXES: &[&str] = &["$setElementOrder/", "$deleteFromPrimitiveList/"];

/// Makes `map` (at `path`) a declaration: refuses the directives a patch would carry, and
/// drops nulls, which declare nothing.
fn declared(map: &mut Map<String, Value>, path: &str) -> Result<(), Status> {
    let at = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    if let Some(key) = map
        .keys()
        .find(|k| DIRECTIVES.contains(&k.as_str()) || DIRECTIVE_PREFIXES.iter().any(|p| k.starts_with(p)))
    {
        return Err(Status::bad_request(format!(
            "the apply configuration is an object, not a patch: {} is a strategic merge patch directive",
            at(key)
        )));
    }
    map.retain(|_, v| !v.is_null());
    for (key, value) in map.iter_mut() {
        match value {
            Value::Object(inner) => declared(inner, &at(key))?,
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    if let Value::Object(inner) = item {
                        declared(inner, &format!("{}[{i}]", at(key)))?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Applies `config` by `manager` to `live` (`None`: the object does not exist yet) and
/// returns the object to store, `managedFields` included.
pub fn apply(
    kind: &str,
    api_version: &str,
    live: Option<&Map<String, Value>>,
    config: &Map<String, Value>,
    manager: &str,
    force: bool,
    now: &str,
) -> Result<Map<String, Value>, Status> {
    // Each object is walked once: its fields and their values, by path.
    let applied = Indexed::of(kind, config);
    let Some(live) = live else {
        let mut object = config.clone();
        let entry = entry(manager, now, applied.fields);
        fields::set_managers(&mut object, &[entry], api_version);
        return Ok(object);
    };
    let live_fields = Indexed::of(kind, live);
    let mut managers = fields::managers(live);
    let is_self = |m: &Manager| m.manager == manager && m.operation == "Apply" && m.subresource.is_empty();

    let mut conflicts: Vec<(String, Vec<Segment>)> = Vec::new();
    for leaf in applied.fields.leaves() {
        // A path that is a leaf of the configuration and not of the live object holds another
        // value there (the same value would have the same fields): not equal, as `None` is not.
        if fields::is_existence(&leaf) || live_fields.value(&leaf) == applied.value(&leaf) {
            continue;
        }
        for m in managers
            .iter()
            .filter(|m| !is_self(m) && m.fields.contains(&leaf))
        {
            conflicts.push((m.manager.clone(), leaf.clone()));
        }
    }
    if !conflicts.is_empty() {
        if !force {
            return Err(conflict(&conflicts, api_version));
        }
        for (owner, leaf) in &conflicts {
            for m in managers.iter_mut().filter(|m| &m.manager == owner) {
                m.fields.remove(leaf);
            }
        }
    }

    let mut object = live.clone();
    strategic::apply(kind, &mut object, config).map_err(|e| Status::invalid(format!("cannot apply: {e}")))?;

    let previous = managers
        .iter()
        .find(|m| is_self(m))
        .map(|m| m.fields.clone())
        .unwrap_or_default();
    let others: Vec<&Manager> = managers.iter().filter(|m| !is_self(m)).collect();
    let mut gone = Fields::default();
    for leaf in previous.leaves() {
        if applied.fields.contains(&leaf) || others.iter().any(|m| m.fields.contains(&leaf)) {
            continue;
        }
        // An element (or map) goes only when no one else owns anything in it.
        if fields::is_existence(&leaf) {
            let parent = &leaf[..leaf.len() - 1];
            if others.iter().any(|m| m.fields.has_prefix(parent)) {
                continue;
            }
        }
        gone.insert(&leaf);
    }
    fields::remove_all(&mut object, &gone);

    managers.retain(|m| !is_self(m));
    managers.push(entry(manager, now, applied.fields));
    managers.retain(|m| !m.fields.is_empty());
    fields::set_managers(&mut object, &managers, api_version);
    Ok(object)
}

fn entry(manager: &str, now: &str, fields: Fields) -> Manager {
    Manager {
        manager: manager.to_owned(),
        operation: "Apply",
        subresource: String::new(),
        time: now.to_owned(),
        fields,
    }
}

/// 409, as the apiserver words an apply conflict, with a cause per field.
fn conflict(conflicts: &[(String, Vec<Segment>)], api_version: &str) -> Status {
    let lines: Vec<String> = conflicts
        .iter()
        .map(|(m, p)| {
            format!(
                "conflict with \"{m}\" using {api_version}: {}",
                fields::display(p)
            )
        })
        .collect();
    let mut s = Status::new(
        409,
        "Conflict",
        format!(
            "Apply failed with {} conflict(s): {}",
            conflicts.len(),
            lines.join("\n")
        ),
    );
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(m, p)| {
            json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with \"{m}\" using {api_version}"),
                "field": fields::display(p),
            })
        })
        .collect();
    s.details = Some(json!({"causes": causes}));
    s
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn cm(data: Value) -> Map<String, Value> {
        obj(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data}))
    }

    #[test]
    fn apply_creates_then_merges_and_removes_what_it_stopped_setting() {
        let first = apply(
            "ConfigMap",
            "v1",
            None,
            &cm(json!({"a": "1", "b": "2"})),
            "me",
            false,
            "t",
        )
        .unwrap();
        assert_eq!(first["metadata"]["managedFields"][0]["manager"], "me");
        assert_eq!(first["metadata"]["managedFields"][0]["operation"], "Apply");
        // Someone else adds c; my next apply drops b: b goes, c stays.
        let mut live = first.clone();
        live["data"]["c"] = json!("3");
        let mut managers = fields::managers(&live);
        fields::record_update("ConfigMap", &mut managers, "other", "", "t", &first, &live);
        fields::set_managers(&mut live, &managers, "v1");
        let second = apply(
            "ConfigMap",
            "v1",
            Some(&live),
            &cm(json!({"a": "1"})),
            "me",
            false,
            "t2",
        )
        .unwrap();
        assert_eq!(second["data"], json!({"a": "1", "c": "3"}));
    }

    #[test]
    fn a_field_owned_by_another_manager_with_another_value_conflicts_unless_forced() {
        let first = apply("ConfigMap", "v1", None, &cm(json!({"a": "1"})), "me", false, "t").unwrap();
        let err = apply(
            "ConfigMap",
            "v1",
            Some(&first),
            &cm(json!({"a": "2"})),
            "you",
            false,
            "t",
        )
        .unwrap_err();
        assert_eq!(err.code, 409);
        assert!(err.message.contains("conflict with \"me\""), "{}", err.message);
        assert_eq!(err.details.as_ref().unwrap()["causes"][0]["field"], ".data.a");
        // The same value is shared, not a conflict.
        let shared = apply(
            "ConfigMap",
            "v1",
            Some(&first),
            &cm(json!({"a": "1"})),
            "you",
            false,
            "t",
        )
        .unwrap();
        assert_eq!(shared["metadata"]["managedFields"].as_array().unwrap().len(), 2);
        // Forced: the field moves to the new manager; the old one keeps only that data exists.
        let forced = apply(
            "ConfigMap",
            "v1",
            Some(&first),
            &cm(json!({"a": "2"})),
            "you",
            true,
            "t",
        )
        .unwrap();
        assert_eq!(forced["data"]["a"], "2");
        let managers = fields::managers(&forced);
        let owner = |name: &str| {
            managers
                .iter()
                .find(|m| m.manager == name)
                .unwrap()
                .fields
                .to_json()
        };
        assert_eq!(owner("you"), json!({"f:data": {".": {}, "f:a": {}}}));
        assert_eq!(owner("me"), json!({"f:data": {".": {}}}));
    }

    #[test]
    fn bodies_are_checked() {
        assert_eq!(parse(b"a: b").unwrap()["a"], "b", "YAML");
        assert_eq!(
            parse(b"metadata:\n  name: x\ndata:\n  n: 1\n").unwrap()["data"]["n"],
            1
        );
        assert_eq!(parse(b"- a").unwrap_err().code, 400, "a YAML list");
        assert_eq!(parse(b"a: [unclosed").unwrap_err().code, 400);
        assert_eq!(parse(b"[1]").unwrap_err().code, 400);
        assert_eq!(
            parse(br#"{"metadata":{"managedFields":[]}}"#).unwrap_err().code,
            400
        );
        assert!(parse(br#"{"metadata":{"name":"x"}}"#).is_ok());
    }

    #[test]
    fn configurations_declare_and_do_not_patch() {
        for body in [
            r#"{"metadata":{"labels":{"$patch":"replace"}}}"#,
            r#"{"spec":{"containers":[{"name":"a","$patch":"delete"}]}}"#,
            r#"{"spec":{"$setElementOrder/containers":[]}}"#,
            r#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["x"]}}"#,
            r#"{"spec":{"volumes":[{"$retainKeys":["name"]}]}}"#,
        ] {
            let refused = parse(body.as_bytes()).unwrap_err();
            assert_eq!(refused.code, 400, "{body}");
            assert!(
                refused.message.contains("is a strategic merge patch directive"),
                "{body}: {}",
                refused.message
            );
        }
        assert!(
            parse(br#"{"spec":{"containers":[{"name":"a","$patch":"delete"}]}}"#)
                .unwrap_err()
                .message
                .contains("spec.containers[0].$patch")
        );
        let config =
            parse(br#"{"metadata":{"labels":{"a":null,"b":"1"}},"data":null,"x":[{"y":null}]}"#).unwrap();
        assert_eq!(
            Value::Object(config),
            json!({"metadata": {"labels": {"b": "1"}}, "x": [{}]})
        );
    }

    #[test]
    fn a_null_takes_nothing_from_another_manager() {
        let first = apply("ConfigMap", "v1", None, &cm(json!({"a": "1"})), "me", false, "t").unwrap();
        let config = parse(
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":null,"b":"2"}}"#,
        )
        .unwrap();
        let out = apply("ConfigMap", "v1", Some(&first), &config, "you", false, "t").unwrap();
        assert_eq!(out["data"], json!({"a": "1", "b": "2"}));
    }
}
