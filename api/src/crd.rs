//! CustomResourceDefinitions: what a CRD (`apiextensions.k8s.io/v1`) asks the server to serve,
//! as [`KindSpec`]s (one per served version), and its conditions' names.
//!
//! A custom resource is served in JSON only (as the apiserver serves them), stored under
//! `/registry/<group>/<plural>/` in its storage version and served in each served version by
//! `None` conversion (only `apiVersion` differs).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::printers::{self, Cell, Column, Printer};
use crate::registry::{KindSpec, Lists, NameRule, OpenApiSchema, ScalePaths, SelectableField};
use crate::schema::Schema;

/// The finalizer under which a deleted CRD's objects are deleted before it goes.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// The names a CRD asks for, defaulted as the apiserver defaults them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    /// The API group.
    pub group: String,
    /// `widgets`.
    pub plural: String,
    /// `widget`.
    pub singular: String,
    /// `Widget`.
    pub kind: String,
    /// `WidgetList`.
    pub list_kind: String,
    /// `wg`.
    pub short_names: Vec<String>,
    /// `all`.
    pub categories: Vec<String>,
}

impl Names {
    /// The CRD's `spec.names` (and group), or why it has none.
    pub fn of(crd: &Value) -> Result<Names, String> {
        let spec = &crd["spec"];
        let names = &spec["names"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        };
        let group = text(&spec["group"]);
        let plural = text(&names["plural"]);
        let kind = text(&names["kind"]);
        if group.is_empty() || plural.is_empty() || kind.is_empty() {
            return Err("spec.group, spec.names.plural and spec.names.kind are required".into());
        }
        let singular = match text(&names["singular"]) {
            s if s.is_empty() => kind.to_ascii_lowercase(),
            s => s,
        };
        let list_kind = match text(&names["listKind"]) {
            s if s.is_empty() => format!("{kind}List"),
            s => s,
        };
        Ok(Names {
            group,
            plural,
            singular,
            kind,
            list_kind,
            short_names: strings(&names["shortNames"]),
            categories: strings(&names["categories"]),
        })
    }

    /// `status.acceptedNames` once accepted.
    pub fn accepted(&self) -> Value {
        let mut out = Map::new();
        out.insert("plural".into(), Value::from(self.plural.clone()));
        out.insert("singular".into(), Value::from(self.singular.clone()));
        out.insert("kind".into(), Value::from(self.kind.clone()));
        out.insert("listKind".into(), Value::from(self.list_kind.clone()));
        if !self.short_names.is_empty() {
            out.insert("shortNames".into(), Value::from(self.short_names.clone()));
        }
        if !self.categories.is_empty() {
            out.insert("categories".into(), Value::from(self.categories.clone()));
        }
        Value::Object(out)
    }

    /// The first of these names `other` (a kind served in the same group) already uses, if
    /// any: the CRD's `NamesAccepted` condition is then false.
    pub fn conflict_with(&self, other: &KindSpec) -> Option<String> {
        if other.group != self.group {
            return None;
        }
        if other.plural == self.plural {
            return Some(format!("{:?} is already in use", self.plural));
        }
        if other.singular == self.singular {
            return Some(format!("{:?} is already in use", self.singular));
        }
        if other.kind == self.kind {
            return Some(format!("{:?} is already in use", self.kind));
        }
        self.short_names
            .iter()
            .find(|s| other.short_names.contains(s))
            .map(|s| format!("{s:?} is already in use"))
    }
}

/// A dotted path from a CRD's JSONPath-like field path (`.spec.replicas`).
fn dotted(path: &str) -> String {
    path.trim_start_matches('.').to_owned()
}

/// The printer of one version: Name, then the `additionalPrinterColumns` (Name and Age when it
/// declares none).
fn printer(version: &Value) -> Printer {
    let Some(columns) = version["additionalPrinterColumns"]
        .as_array()
        .filter(|c| !c.is_empty())
    else {
        return Printer::default_columns();
    };
    let mut out = vec![printers::name()];
    for c in columns {
        let text = |f: &str| c[f].as_str().unwrap_or_default().to_owned();
        out.push(Column {
            name: text("name"),
            kind: text("type"),
            format: text("format"),
            priority: c["priority"]
                .as_u64()
                .map_or(0, |p| p.min(u64::from(u8::MAX)) as u8),
            description: text("description"),
            cell: Cell::JsonPath(text("jsonPath")),
        });
    }
    Printer::of(out)
}

/// The definition name the apiserver gives a custom resource's schema: the group reversed,
/// the version and the kind (`com.example.v1.Widget`).
pub fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// The kinds `crd` serves: one [`KindSpec`] per served version, or why it serves none.
///
/// A version whose schema does not compile is served without it (nothing pruned, defaulted or
/// validated): what is wrong with it is the second part of the answer.
pub fn kinds_of(crd: &Value) -> Result<(Vec<KindSpec>, Vec<String>), String> {
    let mut problems = Vec::new();
    let names = Names::of(crd)?;
    let spec = &crd["spec"];
    let namespaced = spec["scope"].as_str() != Some("Cluster");
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    let storage = versions
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))
        .and_then(|v| v["name"].as_str())
        .ok_or("no storage version")?;
    let stored_as = format!("{}/{storage}", names.group);
    // Each version's schema, compiled once (the storage version's is also every served
    // version's read schema); a schema that does not compile is a problem, not a refusal.
    let mut schemas: Vec<Option<Arc<Schema>>> = Vec::with_capacity(versions.len());
    for (index, version) in versions.iter().enumerate() {
        let compiled = version
            .pointer("/schema/openAPIV3Schema")
            .filter(|s| s.is_object())
            .and_then(|schema| {
                let at = format!("spec.versions[{index}].schema.openAPIV3Schema");
                // A stored CRD whose schema this server would refuse (written by another
                // version, or straight to the store) is still served, as the apiserver serves
                // a non-structural one: unvalidated, and said so.
                Schema::compile(schema, &at)
                    .map_err(|errors| problems.extend(errors.iter().map(ToString::to_string)))
                    .ok()
            });
        schemas.push(compiled.map(Arc::new));
    }
    let version_schemas: Arc<BTreeMap<String, Arc<Schema>>> = Arc::new(
        versions
            .iter()
            .zip(&schemas)
            .filter_map(|(v, s)| {
                let name = v["name"].as_str()?;
                Some((format!("{}/{name}", names.group), s.clone()?))
            })
            .collect(),
    );
    let mut out = Vec::new();
    for (index, version) in versions
        .iter()
        .enumerate()
        .filter(|(_, v)| v["served"].as_bool() == Some(true))
    {
        let name = version["name"].as_str().unwrap_or_default();
        let mut kind = KindSpec::new(&names.group, name, &names.kind, &names.plural)
            .singular(&names.singular)
            .names(NameRule::Subdomain)
            .printer(printer(version))
            .generation();
        kind.short_names = names.short_names.clone();
        kind.categories = names.categories.clone();
        kind.namespaced = namespaced;
        // Stored in the storage version, served in this one (also after the storage version
        // changes, when objects of the old one remain).
        kind.stored_as = Some(stored_as.clone());
        let subresources = &version["subresources"];
        if subresources["status"].is_object() {
            // The status is the controller's, written through /status: not taken on create.
            kind = kind.status().initial_status(|o| {
                o.remove("status");
            });
        }
        if let Some(scale) = subresources["scale"].as_object() {
            let path = |f: &str| scale.get(f).and_then(Value::as_str).map(dotted);
            kind = kind.scale(ScalePaths {
                spec_replicas: path("specReplicasPath").unwrap_or_else(|| "spec.replicas".into()),
                status_replicas: path("statusReplicasPath").unwrap_or_else(|| "status.replicas".into()),
                label_selector: path("labelSelectorPath"),
            });
        }
        kind.fields = version["selectableFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["jsonPath"].as_str())
            .map(|p| SelectableField {
                path: dotted(p),
                unset: None,
            })
            .collect();
        kind.strategy.schema = schemas[index].clone();
        kind.strategy.lists = Lists::Schema;
        kind.strategy.version_schemas = version_schemas.clone();
        if let Some(schema) = version
            .pointer("/schema/openAPIV3Schema")
            .filter(|s| s.is_object())
        {
            let definition = definition_name(&names.group, name, &names.kind);
            kind.openapi = Some((definition, OpenApiSchema::Json(Arc::new(schema.clone()))));
        }
        out.push(kind);
    }
    Ok((out, problems))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn crd() -> Value {
        json!({"metadata": {"name": "widgets.example.com"}, "spec": {
        "group": "example.com", "scope": "Namespaced",
        "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wg"]},
        "versions": [
            {"name": "v1", "served": true, "storage": true,
             "schema": {"openAPIV3Schema": {"type": "object"}},
             "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}},
             "selectableFields": [{"jsonPath": ".spec.color"}],
             "additionalPrinterColumns": [{"name": "Color", "type": "string", "jsonPath": ".spec.color"}]},
            {"name": "v1beta1", "served": true, "storage": false},
            {"name": "v1alpha1", "served": false, "storage": false},
        ]}})
    }

    #[test]
    fn a_crd_serves_a_kind_per_served_version() {
        let (kinds, problems) = kinds_of(&crd()).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(kinds.len(), 2);
        let v1 = &kinds[0];
        assert_eq!(
            (v1.api_version(), v1.prefix()),
            ("example.com/v1".into(), "/registry/example.com/widgets/".into())
        );
        assert_eq!(v1.stored_as.as_deref(), Some("example.com/v1"));
        assert_eq!(kinds[1].stored_as.as_deref(), Some("example.com/v1"));
        assert_eq!(v1.subresources.scale.as_ref().unwrap().spec_replicas, "spec.size");
        assert_eq!(v1.fields[0].path, "spec.color");
        assert_eq!(
            v1.printer
                .columns
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            ["Name", "Color"]
        );
        assert_eq!(v1.openapi.as_ref().unwrap().0, "com.example.v1.Widget");
        assert!(kinds[1].printer.columns.len() == 2 && kinds[1].openapi.is_none());
        // Objects read through any version are pruned and defaulted by the schema of the
        // version they were written in, an unserved one's too.
        let mut three = crd();
        three["spec"]["versions"][2]["schema"] = json!({"openAPIV3Schema": {"type": "object"}});
        let (kinds, _) = kinds_of(&three).unwrap();
        for kind in &kinds {
            assert_eq!(
                kind.strategy.version_schemas.keys().collect::<Vec<_>>(),
                ["example.com/v1", "example.com/v1alpha1"]
            );
        }
    }

    #[test]
    fn names_conflict_within_a_group() {
        let names = Names::of(&crd()).unwrap();
        assert_eq!(names.list_kind, "WidgetList");
        let other = KindSpec::new("example.com", "v1", "Gadget", "gadgets").short_names(&["wg"]);
        assert_eq!(
            names.conflict_with(&other).as_deref(),
            Some("\"wg\" is already in use")
        );
        let elsewhere = KindSpec::new("other.com", "v1", "Widget", "widgets");
        assert_eq!(names.conflict_with(&elsewhere), None);
    }
}
