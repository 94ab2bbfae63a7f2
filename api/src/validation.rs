//! The validation of the built-in kinds on a write, as the apiserver's validation does it, for
//! what a user meets daily: the metadata of every kind (label and annotation syntax and sizes,
//! finalizer names, no new finalizer on an object being deleted), a Pod's required fields,
//! ports, resources and quantities and the immutability of its spec, the keys of a
//! ConfigMap's or a Secret's data, and the RBAC kinds' rules, role references and subjects.
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
pub(crate) mod field;
mod meta;
mod names;
mod pod;
mod quantity;
mod rbac;

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
    /// A new object's fields.
    create: fn(&Map<String, Value>, &mut Errors),
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
    update: pod::validate_update,
};

/// A ConfigMap's: the keys of its data.
pub static CONFIG_MAP: Checks = Checks {
    quantities: &[],
    decode: decodes,
    create: data::config_map,
    update: unrestricted,
};

/// A Secret's: its data decodes from base64, and its keys.
pub static SECRET: Checks = Checks {
    quantities: &[],
    decode: data::decode_secret,
    create: data::secret,
    update: unrestricted,
};

/// A Node's: its capacity and allocatable quantities decode.
pub static NODE: Checks = Checks {
    quantities: &["status.capacity", "status.allocatable"],
    decode: decodes,
    create: unchecked,
    update: unrestricted,
};

/// A Role's rules.
pub static ROLE: Checks = Checks {
    quantities: &[],
    decode: decodes,
    create: rbac::role,
    update: unrestricted,
};

/// A ClusterRole's rules and aggregation rule.
pub static CLUSTER_ROLE: Checks = Checks {
    quantities: &[],
    decode: decodes,
    create: rbac::cluster_role,
    update: unrestricted,
};

/// A CustomResourceDefinition's: its name, names, scope, versions (one stored, each with a
/// schema) and `None` conversion.
pub static CUSTOM_RESOURCE_DEFINITION: Checks = Checks {
    quantities: &[],
    decode: decodes,
    create: crd::validate,
    update: crd::validate_update,
};

/// A RoleBinding's role reference (which may not change) and subjects.
pub static ROLE_BINDING: Checks = Checks {
    quantities: &[],
    decode: decodes,
    create: rbac::role_binding,
    update: rbac::binding_update,
};

/// A ClusterRoleBinding's role reference (which may not change) and subjects.
pub static CLUSTER_ROLE_BINDING: Checks = Checks {
    quantities: &[],
    decode: decodes,
    create: rbac::cluster_role_binding,
    update: rbac::binding_update,
};

fn decodes(_: &Map<String, Value>) -> Result<(), String> {
    Ok(())
}

fn unchecked(_: &Map<String, Value>, _: &mut Errors) {}

fn unrestricted(_: &Map<String, Value>, _: &Map<String, Value>, _: &mut Errors) {}

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
