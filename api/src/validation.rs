//! The validation of the built-in kinds on a write, as the apiserver's validation does it, for
//! what a user meets daily: the metadata of every kind (label and annotation syntax and sizes,
//! finalizer names, no new finalizer on an object being deleted), a Pod's required fields,
//! ports, resources and quantities and the immutability of its spec, the keys of a
//! ConfigMap's or a Secret's data, a Service's ports, and the RBAC kinds' rules, role references and subjects.
//!
//! Plain values in, a typed refusal out: no HTTP here. A refusal is either [`Undecodable`]
//! (the apiserver could not even decode the body into its type: a quantity that is none,
//! data that is not base64) or a list of [`FieldError`]s, each with the apiserver's field
//! path, reason and message; the server makes the Status of either.
//!
//! What each kind checks is a declaration ([`Checks`]), which the kind's registry entry names;
//! the checks live in one file per concern under `validation/`.
//!
//! [`Undecodable`]: Refusal::Undecodable

mod crd;
mod data;
mod event;
pub(crate) mod field;
mod meta;
mod names;
mod pod;
mod quantity;
mod rbac;
mod service;

use serde_json::{Map, Value};

use field::Errors;
pub use field::{ErrorKind, FieldError};
pub use names::path_segment;
pub use quantity::{Quantity, parse as parse_quantity};

/// Why a written object is refused.
#[derive(Debug, PartialEq)]
pub enum Refusal {
    /// A value does not decode into its type (the apiserver's decoding fails before any
    /// validation): why.
    Undecodable(String),
    /// The fields that are invalid, in the order the apiserver finds them.
    Invalid(Vec<FieldError>),
}

/// What one kind checks beyond its metadata: a kind's declaration names its checks
/// ([`Strategy::checks`](crate::registry::Strategy::checks)).
pub struct Checks {
    /// The maps of resource quantities, which must decode (`[]` steps into each element of
    /// a list).
    quantities: &'static [&'static str],
    /// Other values that must decode: the first that does not, and why.
    decode: fn(&Map<String, Value>) -> Result<(), String>,
    /// A new object's fields (checked again on each update).
    create: fn(&Map<String, Value>, &mut Errors),
    /// What only a create checks (an events.k8s.io/v1 Event's strict rules).
    create_only: fn(&Map<String, Value>, &mut Errors),
    /// An update's rules beyond the new object's fields: what may not change.
    update: fn(&Map<String, Value>, &Map<String, Value>, &mut Errors),
}

impl std::fmt::Debug for Checks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checks")
            .field("quantities", &self.quantities)
            .finish_non_exhaustive()
    }
}

/// A Pod's: required fields, ports, resources and quantities, and an immutable spec.
pub static POD: Checks = Checks {
    quantities: &[
        "spec.containers[].resources.limits",
        "spec.containers[].resources.requests",
        "spec.initContainers[].resources.limits",
        "spec.initContainers[].resources.requests",
        "spec.ephemeralContainers[].resources.limits",
        "spec.ephemeralContainers[].resources.requests",
        "spec.resources.limits",
        "spec.resources.requests",
        "spec.overhead",
    ],
    decode: decodes,
    create: pod::validate,
    create_only: nothing,
    update: pod::validate_update,
};

/// A ConfigMap's: the keys of its data.
pub static CONFIG_MAP: Checks = Checks {
    quantities: &[],
    decode: decodes,
    create: data::config_map,
    create_only: nothing,
    update: unrestricted,
};

/// A core Event's: the apiserver's legacy rules.
pub static EVENT: Checks = Checks {
    quantities: &[],
    decode: decodes,
    create: event::core,
    create_only: nothing,
    update: unrestricted,
};

/// An events.k8s.io/v1 Event's: the legacy rules and the strict ones, and what an update
/// may not change.
pub static EVENTS_V1_EVENT: Checks = Checks {
    quantities: &[],
    decode: decodes,
    create: event::events_v1_legacy,
    create_only: event::events_v1,
    update: event::events_v1_update,
};

/// A Service's: its ports, type and session affinity.
pub static SERVICE: Checks = Checks {
    quantities: &[],
    decode: decodes,
    create: service::validate,
    create_only: nothing,
    update: unrestricted,
};

/// A Secret's: its data decodes from base64, and its keys.
pub static SECRET: Checks = Checks {
    quantities: &[],
    decode: data::decode_secret,
    create: data::secret,
    create_only: nothing,
    update: unrestricted,
};

/// A Node's: its capacity and allocatable quantities decode.
pub static NODE: Checks = Checks {
    quantities: &["status.capacity", "status.allocatable"],
    decode: decodes,
    create: unchecked,
    create_only: nothing,
    update: unrestricted,
};

/// A Role's rules.
pub static ROLE: Checks = Checks {
    quantities: &[],
    decode: decodes,
    create: rbac::role,
    create_only: nothing,
    update: unrestricted,
};

/// A ClusterRole's rules and aggregation rule.
pub static CLUSTER_ROLE: Checks = Checks {
    quantities: &[],
    decode: decodes,
    create: rbac::cluster_role,
    create_only: nothing,
    update: unrestricted,
};

/// A CustomResourceDefinition's: its name, names, scope, versions (one stored, each with a
/// schema) and `None` conversion.
pub static CUSTOM_RESOURCE_DEFINITION: Checks = Checks {
    quantities: &[],
    decode: decodes,
    create: crd::validate,
    create_only: nothing,
    update: crd::validate_update,
};

/// A RoleBinding's role reference (which may not change) and subjects.
pub static ROLE_BINDING: Checks = Checks {
    quantities: &[],
    decode: decodes,
    create: rbac::role_binding,
    create_only: nothing,
    update: rbac::binding_update,
};

/// A ClusterRoleBinding's role reference (which may not change) and subjects.
pub static CLUSTER_ROLE_BINDING: Checks = Checks {
    quantities: &[],
    decode: decodes,
    create: rbac::cluster_role_binding,
    create_only: nothing,
    update: rbac::binding_update,
};

fn decodes(_: &Map<String, Value>) -> Result<(), String> {
    Ok(())
}

fn unchecked(_: &Map<String, Value>, _: &mut Errors) {}

fn unrestricted(_: &Map<String, Value>, _: &Map<String, Value>, _: &mut Errors) {}

fn nothing(_: &Map<String, Value>, _: &mut Errors) {}

/// Whether the object decodes into its kind at all, as the apiserver decodes it before any
/// validation.
fn decode(rules: Option<&Checks>, object: &Map<String, Value>) -> Result<(), Refusal> {
    let Some(r) = rules else { return Ok(()) };
    quantity::decode_at(object, r.quantities).map_err(Refusal::Undecodable)?;
    (r.decode)(object).map_err(Refusal::Undecodable)
}

/// Checks a new `object`, as it will be stored: its metadata, then its kind's `checks`.
pub fn on_create(checks: Option<&Checks>, object: &Map<String, Value>) -> Result<(), Refusal> {
    let rules = checks;
    decode(rules, object)?;
    let mut errors = Errors::default();
    meta::validate(object, &mut errors);
    if let Some(r) = rules {
        (r.create)(object, &mut errors);
        (r.create_only)(object, &mut errors);
    }
    errors.into_result()
}

/// Checks `object`, the update of `old`, as it will be stored: the metadata update's rules,
/// the new object's fields, then what its kind's `checks` do not let change.
pub fn on_update(
    checks: Option<&Checks>,
    object: &Map<String, Value>,
    old: &Map<String, Value>,
) -> Result<(), Refusal> {
    let rules = checks;
    decode(rules, object)?;
    let mut errors = Errors::default();
    meta::validate_update(object, old, &mut errors);
    meta::validate(object, &mut errors);
    if let Some(r) = rules {
        (r.create)(object, &mut errors);
        (r.update)(object, old, &mut errors);
    }
    errors.into_result()
}

/// Checks a pod's update through `/ephemeralcontainers` (`object`, the update of `old`, whose
/// spec differs in `spec.ephemeralContainers` alone): ephemeral containers are only added,
/// never changed or removed, and each new one is named, unique among the pod's containers, and
/// has an image.
pub fn on_ephemeral_containers_update(
    object: &Map<String, Value>,
    old: &Map<String, Value>,
) -> Result<(), Refusal> {
    let mut errors = Errors::default();
    pod::ephemeral_containers_update(object, old, &mut errors);
    errors.into_result()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn fields(r: Result<(), Refusal>) -> Vec<(String, &'static str)> {
        match r {
            Err(Refusal::Invalid(errors)) => errors
                .iter()
                .map(|e| (e.field.clone(), e.kind.reason()))
                .collect(),
            other => panic!("not field errors: {other:?}"),
        }
    }

    #[test]
    fn events_are_checked_by_the_legacy_rules_and_through_events_k8s_io_by_the_strict_ones() {
        let messages = |r: Result<(), Refusal>| -> Vec<String> {
            match r {
                Ok(()) => Vec::new(),
                Err(Refusal::Invalid(errors)) => errors.iter().map(ToString::to_string).collect(),
                other => panic!("{other:?}"),
            }
        };
        // An old-style core Event belongs in its object's namespace.
        let core = obj(json!({"metadata": {"name": "e", "namespace": "a"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "a"}, "reason": "R"}));
        assert_eq!(on_create(Some(&EVENT), &core), Ok(()));
        let elsewhere = obj(json!({"metadata": {"name": "e", "namespace": "b"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "a"}}));
        assert_eq!(
            messages(on_create(Some(&EVENT), &elsewhere)),
            ["involvedObject.namespace: Invalid value: \"a\": does not match event.namespace"]
        );
        // One with an eventTime says who reported it.
        let reported = obj(json!({"metadata": {"name": "e", "namespace": "a"},
            "involvedObject": {"namespace": "a"}, "eventTime": "2026-12-02T10:00:00.000000Z"}));
        assert_eq!(
            messages(on_create(Some(&EVENT), &reported)),
            [
                "reportingComponent: Required value",
                "reportingComponent: Invalid value: \"\": name part must be non-empty",
                "reportingComponent: Invalid value: \"\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName' or 'my.name' or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
                "reportingInstance: Required value",
                "action: Required value",
                "reason: Required value",
            ]
        );
        // Through events.k8s.io/v1: a complete Event is taken; a legacy one is not.
        let v1 = obj(json!({"metadata": {"name": "e", "namespace": "a"},
            "regarding": {"kind": "Pod", "name": "p", "namespace": "a"}, "reason": "Started",
            "note": "n", "type": "Normal", "action": "Start", "reportingController": "kubelet",
            "reportingInstance": "node-1", "eventTime": "2026-12-02T10:00:00.000000Z"}));
        assert_eq!(on_create(Some(&EVENTS_V1_EVENT), &v1), Ok(()));
        let mut legacy = v1.clone();
        legacy.remove("eventTime");
        legacy.insert("type".into(), json!("Info"));
        legacy.insert("deprecatedCount".into(), json!(3));
        legacy.insert("series".into(), json!({"count": 1}));
        assert_eq!(
            messages(on_create(Some(&EVENTS_V1_EVENT), &legacy)),
            [
                "series.count: Invalid value: \"\": should be at least 2",
                "series.lastObservedTime: Required value",
                "eventTime: Required value",
                "type: Invalid value: \"\": has invalid value: Info",
                "count: Invalid value: \"\": needs to be unset",
            ]
        );
        // Its fields but the series do not change; one set to its zero value is unchanged.
        let mut zeroed = v1.clone();
        zeroed.insert("deprecatedCount".into(), json!(0));
        zeroed.insert("related".into(), Value::Null);
        zeroed.insert("deprecatedSource".into(), json!({"component": ""}));
        assert_eq!(on_update(Some(&EVENTS_V1_EVENT), &zeroed, &v1), Ok(()));
        let mut renoted = v1.clone();
        renoted.insert("note".into(), json!("other"));
        assert_eq!(
            messages(on_update(Some(&EVENTS_V1_EVENT), &renoted, &v1)),
            ["message: Invalid value: \"other\": field is immutable"]
        );
    }

    #[test]
    fn kinds_without_rules_have_their_metadata_checked() {
        let lease = obj(json!({"metadata": {"name": "l", "labels": {"a": "b c"}}}));
        assert_eq!(
            fields(on_create(None, &lease)),
            [("metadata.labels".to_owned(), "FieldValueInvalid")]
        );
        let ok = obj(json!({"metadata": {"name": "l", "labels": {"a": "b"}}}));
        assert_eq!(on_create(None, &ok), Ok(()));
    }

    #[test]
    fn an_undecodable_value_is_refused_before_any_field() {
        let pod = obj(
            json!({"metadata": {"labels": {"-": "x"}}, "spec": {"containers": [
            {"name": "a", "image": "i", "resources": {"limits": {"cpu": "lots"}}}]}}),
        );
        match on_create(Some(&POD), &pod) {
            Err(Refusal::Undecodable(why)) => assert!(why.starts_with("quantities must match"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
