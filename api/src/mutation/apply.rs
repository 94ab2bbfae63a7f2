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
use crate::mutation::strategic::{self, ListRules};
use crate::mutation::yaml;
use crate::validation::field::go_quote;

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
/// returns the object to store, `managedFields` included; the object's lists are as `rules`
/// says.
pub fn apply(
    rules: ListRules<'_>,
    api_version: &str,
    live: Option<&Map<String, Value>>,
    config: &Map<String, Value>,
    manager: &str,
    force: bool,
    now: &str,
) -> Result<Map<String, Value>, Status> {
    // Each object is walked once: its fields and their values, by path.
    let applied = Indexed::of(rules, config);
    let Some(live) = live else {
        let mut object = config.clone();
        let entry = entry(manager, api_version, now, applied.fields);
        fields::set_managers(&mut object, &[entry], api_version);
        return Ok(object);
    };
    let live_fields = Indexed::of(rules, live);
    let mut managers = fields::managers(live);
    let is_self = |m: &Manager| m.manager == manager && m.operation == "Apply" && m.subresource.is_empty();

    // (the owning entry's index, the field), in the order of the configuration's fields.
    let mut conflicts: Vec<(usize, Vec<Segment>)> = Vec::new();
    for leaf in applied.fields.leaves() {
        // A path that is a leaf of the configuration and not of the live object holds another
        // value there (the same value would have the same fields): not equal, as `None` is not.
        if fields::is_existence(&leaf) || live_fields.value(&leaf) == applied.value(&leaf) {
            continue;
        }
        for (i, _) in managers
            .iter()
            .enumerate()
            .filter(|(_, m)| !is_self(m) && m.fields.contains(&leaf))
        {
            conflicts.push((i, leaf.clone()));
        }
    }
    if !conflicts.is_empty() {
        if !force {
            return Err(conflict(&managers, &conflicts, api_version));
        }
        for (owner, leaf) in &conflicts {
            managers[*owner].fields.remove(leaf);
        }
    }

    let mut object = live.clone();
    strategic::apply(rules.for_apply(), &mut object, config)
        .map_err(|e| Status::invalid(format!("cannot apply: {e}")))?;

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
        // Only a field the live object has, as today's list rules name it, goes: an entry
        // recorded under other rules (a list keyed on fewer keys, or atomic before a schema
        // made it a map, by an older server) matches no field and removes nothing, as
        // structured-merge-diff drops entries its schema no longer has. Otherwise
        // `k:{"port":53}` would take both the UDP and the TCP port 53, and an atomic `f:ports`
        // the whole list just merged.
        if !live_fields.fields.contains(&leaf) {
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
    managers.push(entry(manager, api_version, now, applied.fields));
    managers.retain(|m| !m.fields.is_empty());
    fields::set_managers(&mut object, &managers, api_version);
    Ok(object)
}

/// An applier's entry: in the version it applied in (an applier has one entry, whatever the
/// version, as the apiserver keeps it).
fn entry(manager: &str, api_version: &str, now: &str, fields: Fields) -> Manager {
    Manager {
        manager: manager.to_owned(),
        operation: "Apply",
        subresource: String::new(),
        api_version: api_version.to_owned(),
        time: now.to_owned(),
        fields,
    }
}

/// A conflicting manager as the apiserver names it: `"name"`, ` with subresource "status"`
/// for a subresource's, and ` using <apiVersion>` for an updater (in its entry's version, or
/// `api_version` where it names none).
fn print_manager(m: &Manager, api_version: &str) -> String {
    let mut out = go_quote(&m.manager);
    if !m.subresource.is_empty() {
        out.push_str(&format!(" with subresource {}", go_quote(&m.subresource)));
    }
    if m.operation == "Update" {
        let version = if m.api_version.is_empty() {
            api_version
        } else {
            &m.api_version
        };
        out.push_str(&format!(" using {version}"));
    }
    out
}

/// 409, as the apiserver words an apply conflict: one cause per field, and a message that
/// names the one conflict, or lists the fields under each manager (managers in order).
fn conflict(managers: &[Manager], conflicts: &[(usize, Vec<Segment>)], api_version: &str) -> Status {
    let printed = |i: usize| print_manager(&managers[i], api_version);
    let message = match conflicts {
        [(owner, path)] => format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            printed(*owner),
            fields::display(path)
        ),
        _ => {
            let mut owners: Vec<usize> = conflicts.iter().map(|(i, _)| *i).collect();
            owners.sort_by(|a, b| {
                let key = |m: &Manager| {
                    (
                        m.manager.clone(),
                        m.operation,
                        m.api_version.clone(),
                        m.subresource.clone(),
                    )
                };
                key(&managers[*a]).cmp(&key(&managers[*b]))
            });
            owners.dedup();
            let mut lines = Vec::new();
            for owner in owners {
                lines.push(format!("conflicts with {}:", printed(owner)));
                for (_, path) in conflicts.iter().filter(|(i, _)| *i == owner) {
                    lines.push(format!("- {}", fields::display(path)));
                }
            }
            format!(
                "Apply failed with {} conflicts: {}",
                conflicts.len(),
                lines.join("\n")
            )
        }
    };
    let mut s = Status::new(409, "Conflict", message);
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(owner, p)| {
            json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with {}", printed(*owner)),
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
    use crate::mutation::fields::Writer;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn cm(data: Value) -> Map<String, Value> {
        obj(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data}))
    }

    #[test]
    fn apply_creates_then_merges_and_removes_what_it_stopped_setting() {
        let first = apply(
            ListRules::BuiltIn("ConfigMap"),
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
        fields::record_update(
            ListRules::BuiltIn("ConfigMap"),
            &mut managers,
            &Writer {
                manager: "other",
                subresource: "",
                api_version: "v1",
                time: "t",
            },
            &first,
            &live,
        );
        fields::set_managers(&mut live, &managers, "v1");
        let second = apply(
            ListRules::BuiltIn("ConfigMap"),
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
        let first = apply(
            ListRules::BuiltIn("ConfigMap"),
            "v1",
            None,
            &cm(json!({"a": "1"})),
            "me",
            false,
            "t",
        )
        .unwrap();
        let err = apply(
            ListRules::BuiltIn("ConfigMap"),
            "v1",
            Some(&first),
            &cm(json!({"a": "2"})),
            "you",
            false,
            "t",
        )
        .unwrap_err();
        assert_eq!(err.code, 409);
        // An applier is named alone, with no version.
        assert_eq!(
            err.message,
            "Apply failed with 1 conflict: conflict with \"me\": .data.a"
        );
        assert_eq!(err.details.as_ref().unwrap()["causes"][0]["field"], ".data.a");
        // The same value is shared, not a conflict.
        let shared = apply(
            ListRules::BuiltIn("ConfigMap"),
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
            ListRules::BuiltIn("ConfigMap"),
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
        let first = apply(
            ListRules::BuiltIn("ConfigMap"),
            "v1",
            None,
            &cm(json!({"a": "1"})),
            "me",
            false,
            "t",
        )
        .unwrap();
        let config = parse(
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":null,"b":"2"}}"#,
        )
        .unwrap();
        let out = apply(
            ListRules::BuiltIn("ConfigMap"),
            "v1",
            Some(&first),
            &config,
            "you",
            false,
            "t",
        )
        .unwrap();
        assert_eq!(out["data"], json!({"a": "1", "b": "2"}));
    }

    #[test]
    fn a_services_ports_are_one_per_port_and_protocol_under_apply() {
        // CoreDNS's Service: UDP and TCP on 53. Applied twice, both stay (keyed on the port
        // alone, the second apply merged both into one TCP port).
        let ports = json!([{"name": "dns", "port": 53, "protocol": "UDP"},
                           {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]);
        let config = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kube-dns"},
            "spec": {"ports": ports}});
        let config = config.as_object().unwrap();
        let rules = ListRules::BuiltIn("Service");
        let first = apply(rules, "v1", None, config, "me", false, "t").unwrap();
        let second = apply(rules, "v1", Some(&first), config, "me", false, "t").unwrap();
        assert_eq!(second["spec"]["ports"], ports);
        let owned = &second["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:ports"];
        assert!(
            owned.get(r#"k:{"port":53,"protocol":"UDP"}"#).is_some()
                && owned.get(r#"k:{"port":53,"protocol":"TCP"}"#).is_some(),
            "{owned}"
        );
        // A port that leaves its protocol out is TCP's (its default).
        let config = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"ports": [{"port": 80}]}});
        let made = apply(rules, "v1", None, config.as_object().unwrap(), "me", false, "t").unwrap();
        let owned = &made["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:ports"];
        assert!(
            owned.get(r#"k:{"port":80,"protocol":"TCP"}"#).is_some(),
            "{owned}"
        );
        // A pod template's container ports likewise, in a Deployment.
        let config = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "ports": [
                {"containerPort": 53, "protocol": "UDP"}, {"containerPort": 53, "protocol": "TCP"}]}]}}}});
        let rules = ListRules::BuiltIn("Deployment");
        let first = apply(
            rules,
            "apps/v1",
            None,
            config.as_object().unwrap(),
            "me",
            false,
            "t",
        )
        .unwrap();
        let second = apply(
            rules,
            "apps/v1",
            Some(&first),
            config.as_object().unwrap(),
            "me",
            false,
            "t",
        )
        .unwrap();
        assert_eq!(
            second["spec"]["template"]["spec"]["containers"][0]["ports"],
            config["spec"]["template"]["spec"]["containers"][0]["ports"]
        );
    }

    #[test]
    fn entries_an_older_server_recorded_under_other_list_rules_remove_nothing() {
        // kube-dns as a server keying Service ports on the port alone recorded it, and a
        // custom resource's list as it was recorded before its schema made it a map.
        let ports = json!([{"name": "dns", "port": 53, "protocol": "UDP"},
                           {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]);
        let old_entry = json!([{"manager": "me", "operation": "Apply", "apiVersion": "v1",
            "time": "t", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:ports": {
                r#"k:{"port":53}"#: {".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}}}}}}]);
        let live = obj(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kube-dns", "managedFields": old_entry},
            "spec": {"ports": ports}}));
        let config = obj(
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kube-dns"},
            "spec": {"ports": ports}}),
        );
        let rules = ListRules::BuiltIn("Service");
        let again = apply(rules, "v1", Some(&live), &config, "me", false, "t").unwrap();
        assert_eq!(again["spec"]["ports"], ports, "applied again, both ports stay");
        // Leaving one out removes that one only: the entries are today's now.
        let one = obj(
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kube-dns"},
            "spec": {"ports": [ports[1].clone()]}}),
        );
        let fewer = apply(rules, "v1", Some(&again), &one, "me", false, "t").unwrap();
        assert_eq!(fewer["spec"]["ports"], json!([ports[1].clone()]));

        let schema = crate::schema::Schema::compile(
            &json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"items": {"type": "array",
                "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "required": ["name"], "properties": {
                    "name": {"type": "string"}, "v": {"type": "string"}}}}}}}}),
            "s",
        )
        .expect("a structural schema");
        let items = json!([{"name": "a", "v": "1"}, {"name": "b", "v": "2"}]);
        let atomic = json!([{"manager": "me", "operation": "Apply", "apiVersion": "x/v1",
            "time": "t", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:items": {}}}}]);
        let live = obj(json!({"apiVersion": "x/v1", "kind": "K",
            "metadata": {"name": "k", "managedFields": atomic}, "spec": {"items": items}}));
        let config = obj(
            json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "k"},
            "spec": {"items": items}}),
        );
        let again = apply(
            ListRules::Schema(&schema),
            "x/v1",
            Some(&live),
            &config,
            "me",
            false,
            "t",
        )
        .unwrap();
        assert_eq!(again["spec"]["items"], items, "the atomic entry takes nothing");
    }

    #[test]
    fn a_strategic_patch_still_merges_a_services_ports_by_port_alone() {
        // As the apiserver's strategic merge does (the ports' patchMergeKey is `port`).
        let mut object = json!({"spec": {"ports": [{"port": 53, "protocol": "UDP"}]}})
            .as_object()
            .unwrap()
            .clone();
        strategic::apply(
            ListRules::BuiltIn("Service"),
            &mut object,
            json!({"spec": {"ports": [{"port": 53, "protocol": "TCP"}]}})
                .as_object()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(object["spec"]["ports"], json!([{"port": 53, "protocol": "TCP"}]));
    }

    #[test]
    fn a_conflict_names_each_updater_in_the_version_it_wrote_in_and_groups_many() {
        // op updated a and b in example.com/v1beta1, ed updated c in v1, through /status.
        let live = obj(
            json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"},
            "spec": {"a": "1", "b": "1"}, "status": {"c": "1"}}),
        );
        let mut managers = Vec::new();
        let rules = ListRules::Atomic;
        let spec_only = obj(json!({"spec": {"a": "1", "b": "1"}}));
        let writer = |manager, subresource, api_version| Writer {
            manager,
            subresource,
            api_version,
            time: "t",
        };
        fields::record_update(
            rules,
            &mut managers,
            &writer("op", "", "example.com/v1beta1"),
            &Map::new(),
            &spec_only,
        );
        fields::record_update(
            rules,
            &mut managers,
            &writer("ed", "status", "example.com/v1"),
            &spec_only,
            &live,
        );
        let mut live = live;
        fields::set_managers(&mut live, &managers, "example.com/v1");
        let config = obj(
            json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"},
            "spec": {"a": "2", "b": "2"}, "status": {"c": "2"}}),
        );
        let err = apply(rules, "example.com/v1", Some(&live), &config, "me", false, "t").unwrap_err();
        assert_eq!(
            err.message,
            "Apply failed with 3 conflicts: conflicts with \"ed\" with subresource \"status\" using example.com/v1:\n\
             - .status.c\n\
             conflicts with \"op\" using example.com/v1beta1:\n\
             - .spec.a\n\
             - .spec.b"
        );
        let causes = &err.details.as_ref().unwrap()["causes"];
        assert_eq!(
            causes[0]["message"],
            "conflict with \"op\" using example.com/v1beta1"
        );
        assert_eq!(causes[0]["field"], ".spec.a");
    }
}
