//! The OpenAPI documents: `/openapi/v2` (Swagger 2.0) and `/openapi/v3` with a document per
//! group-version (`/openapi/v3/api/v1`), for the resources served.
//!
//! Schemas are not written here: each type's JSON schema comes from k8s-openapi (its
//! `schemars` feature, generated from the published Kubernetes spec). What this module adds is
//! what kubectl reads beyond the schema:
//! - `x-kubernetes-group-version-kind` on each kind's definition (`kubectl explain` finds a
//!   kind by it) and on each operation;
//! - `x-kubernetes-patch-strategy` and `x-kubernetes-patch-merge-key` on the list fields that
//!   strategic merge patch merges by key, from the same table the server merges with
//!   ([`MERGE_LISTS`]);
//! - the paths and operations, whose PATCH, POST and PUT declare the `fieldValidation` query
//!   parameter: kubectl then leaves validation to the server ([`OpenApi::prune_unknown`]) rather than
//!   downloading schemas to validate on its own.
//!
//! The documents are built once, when the server starts (and again when the kinds served
//! change), and served as shared bytes; no HTTP here.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use bytes::Bytes;
use k8s_openapi::schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::KindSpec;
use crate::mutation::strategic::{ListRules, ListStrategy, MERGE_LISTS, MergeKeys};
use crate::registry::OpenApiSchema;

mod protobuf;
mod value_types;

pub use value_types::{MAX_DEPTH, ValueError};

/// A served kind with a generated schema: its group, version and schema, from its declaration.
struct Kind<'a> {
    group: &'a str,
    version: &'a str,
    kind: &'a str,
    /// The definition's name (`io.k8s.api.core.v1.Pod`).
    definition: &'a str,
    schema: &'a OpenApiSchema,
}

impl<'a> Kind<'a> {
    fn of(spec: &'a KindSpec) -> Option<Kind<'a>> {
        let (definition, schema) = spec.openapi.as_ref()?;
        Some(Kind {
            group: &spec.group,
            version: &spec.version,
            kind: &spec.kind,
            definition,
            schema,
        })
    }
}

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
/// `metav1.Status`'s definition name.
pub const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
/// `metav1.DeleteOptions`'s definition name.
pub const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";

/// The documents, made once.
pub struct OpenApi {
    v2: Bytes,
    /// `v2` as gnostic's protobuf message.
    v2_protobuf: Bytes,
    v3_index: Bytes,
    /// By group-version path: `api/v1`, `apis/coordination.k8s.io/v1`.
    v3: BTreeMap<String, Bytes>,
    /// Every definition, for server-side field validation.
    definitions: Map<String, Value>,
    /// Definition name by `(apiVersion, kind)`.
    by_kind: BTreeMap<(String, String), String>,
}

impl OpenApi {
    /// The documents for the kinds `served`, whose `info.version` is `version` (the server's
    /// `gitVersion`).
    pub fn build<'a>(served: impl Iterator<Item = &'a KindSpec>, version: &str) -> OpenApi {
        let served: Vec<(Kind<'_>, &KindSpec)> = served.filter_map(|r| Some((Kind::of(r)?, r))).collect();
        let definitions = definitions(&served, "#/definitions/");
        let v2 = json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": version},
            "paths": paths(&served, false),
            "definitions": definitions,
        });
        let mut v3 = BTreeMap::new();
        let mut groups: BTreeMap<String, Vec<(Kind<'_>, &KindSpec)>> = BTreeMap::new();
        for (_, r) in &served {
            if let Some(k) = Kind::of(r) {
                groups.entry(group_version_path(&k)).or_default().push((k, r));
            }
        }
        let mut index = Map::new();
        for (path, served) in &groups {
            let mut schemas = Value::Object(self::definitions(served, "#/components/schemas/"));
            wrap_ref_siblings(&mut schemas);
            let doc = json!({
                "openapi": "3.0.0",
                "info": {"title": "Kubernetes", "version": version},
                "paths": paths(served, true),
                "components": {"schemas": schemas},
            });
            let bytes = Bytes::from(doc.to_string());
            let mut h = std::hash::DefaultHasher::new();
            bytes.hash(&mut h);
            index.insert(
                path.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={:016X}", h.finish())}),
            );
            v3.insert(path.clone(), bytes);
        }
        // Field validation and pruning by the built-in kinds' schemas; a custom resource's
        // (which may keep unknown fields, `x-kubernetes-preserve-unknown-fields`) is not
        // walked here.
        let by_kind = served
            .iter()
            .filter(|(k, _)| matches!(k.schema, OpenApiSchema::Generated(_)))
            .map(|(k, _)| ((api_version(k), k.kind.to_owned()), k.definition.to_owned()))
            .collect();
        let definitions = match v2.get("definitions") {
            Some(Value::Object(m)) => m.clone(),
            _ => Map::new(),
        };
        OpenApi {
            v2_protobuf: Bytes::from(protobuf::document(&v2)),
            v2: Bytes::from(v2.to_string()),
            v3_index: Bytes::from(json!({"paths": index}).to_string()),
            v3,
            definitions,
            by_kind,
        }
    }

    /// `/openapi/v2`.
    pub fn v2(&self) -> Bytes {
        self.v2.clone()
    }

    /// `/openapi/v2` as protobuf.
    pub fn v2_protobuf(&self) -> Bytes {
        self.v2_protobuf.clone()
    }

    /// `/openapi/v3`: where each group-version's document is.
    pub fn v3_index(&self) -> Bytes {
        self.v3_index.clone()
    }

    /// `/openapi/v3/<path>`.
    pub fn v3(&self, path: &str) -> Option<Bytes> {
        self.v3.get(path).cloned()
    }

    /// Removes from `object` (an object of `apiVersion` and `kind`) the fields its schema does
    /// not know, and names them as the apiserver does (`spec.containers[0].imagee`), in
    /// document order. A kind without a schema here keeps every field.
    pub fn prune_unknown(
        &self,
        api_version: &str,
        kind: &str,
        object: &mut Map<String, Value>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(def) = self.by_kind.get(&(api_version.to_owned(), kind.to_owned())) {
            let schema = json!({"$ref": format!("#/definitions/{def}")});
            prune(&self.definitions, &schema, object, "", &mut out);
        }
        out
    }
}

impl OpenApi {
    /// Checks the value types of `object` (an object of `apiVersion` and `kind`) against its
    /// schema, as Go's decoder checks them (a number where a string belongs, a quantity or a
    /// time that does not parse). A kind without a schema here is not checked.
    pub fn check_values(
        &self,
        api_version: &str,
        kind: &str,
        object: &Map<String, Value>,
    ) -> Result<(), ValueError> {
        match self.by_kind.get(&(api_version.to_owned(), kind.to_owned())) {
            Some(def) => value_types::check(&self.definitions, def, object),
            None => Ok(()),
        }
    }
}

fn api_version(k: &Kind) -> String {
    if k.group.is_empty() {
        k.version.to_owned()
    } else {
        format!("{}/{}", k.group, k.version)
    }
}

fn group_version_path(k: &Kind) -> String {
    if k.group.is_empty() {
        format!("api/{}", k.version)
    } else {
        format!("apis/{}/{}", k.group, k.version)
    }
}

fn gvk(k: &Kind) -> Value {
    json!({"group": k.group, "version": k.version, "kind": k.kind})
}

/// The definitions of the served kinds, their lists and what they reference, with kubectl's
/// extensions; references point at `ref_prefix`.
fn definitions(served: &[(Kind<'_>, &KindSpec)], ref_prefix: &str) -> Map<String, Value> {
    let path = ref_prefix
        .trim_start_matches('#')
        .trim_end_matches('/')
        .to_owned();
    let mut g = SchemaSettings::draft07()
        .with(|s| {
            s.definitions_path = path.into();
            s.meta_schema = None;
            s.transforms = Vec::new();
        })
        .into_generator();
    g.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>();
    g.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions>();
    g.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>();
    g.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta>();
    for (k, _) in served {
        if let OpenApiSchema::Generated(schema) = k.schema {
            schema(&mut g);
        }
    }
    let mut defs = g.take_definitions(true);
    // A custom resource's schema is its CRD's, with the object's type fields and metadata as
    // the apiserver publishes them.
    for (k, _) in served {
        if let OpenApiSchema::Json(schema) = k.schema {
            let mut def = Value::clone(schema);
            if let Value::Object(d) = &mut def {
                let properties = d.entry("properties").or_insert_with(|| json!({}));
                if let Value::Object(p) = properties {
                    p.insert("apiVersion".into(), json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}));
                    p.insert("kind".into(), json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}));
                    p.insert(
                        "metadata".into(),
                        json!({"$ref": format!("{ref_prefix}{OBJECT_META}")}),
                    );
                }
                d.entry("type").or_insert_with(|| json!("object"));
            }
            // Never in place of a definition of the server's own (a CRD whose group and
            // kind reversed spell a built-in one's name).
            defs.entry(k.definition.to_owned()).or_insert(def);
        }
    }
    for (k, _) in served {
        if let Some(Value::Object(def)) = defs.get_mut(k.definition) {
            def.insert("x-kubernetes-group-version-kind".into(), json!([gvk(k)]));
        }
        let list_name = format!("{}List", k.definition);
        defs.insert(
            list_name,
            json!({
                "description": format!("{}List is a list of {}.", k.kind, k.kind),
                "type": "object",
                "required": ["items"],
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "items": {"type": "array", "items": {"$ref": format!("{ref_prefix}{}", k.definition)}},
                    "metadata": {"$ref": format!("{ref_prefix}{LIST_META}")},
                },
                "x-kubernetes-group-version-kind": [{"group": k.group, "version": k.version, "kind": format!("{}List", k.kind)}],
            }),
        );
    }
    defs.insert(
        PATCH.into(),
        json!({"description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.", "type": "object"}),
    );
    for (kind, path, strategy) in MERGE_LISTS {
        let (root, path) = match (*kind, path.strip_prefix("metadata.")) {
            ("*", Some(rest)) => (OBJECT_META.to_owned(), rest),
            ("*", None) => continue,
            // Only a kind that merges its lists as the built-in type of its name does.
            (kind, _) => match served
                .iter()
                .find(|(k, r)| k.kind == kind && matches!(r.list_rules(), ListRules::BuiltIn(_)))
            {
                Some((k, _)) => (k.definition.to_owned(), *path),
                None => continue,
            },
        };
        let extensions = match strategy {
            ListStrategy::MergeByKey(MergeKeys::One(key)) => {
                json!({"x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": key})
            }
            ListStrategy::MergeSet => json!({"x-kubernetes-patch-strategy": "merge"}),
            ListStrategy::MergeByKey(MergeKeys::Many(..) | MergeKeys::Fixed(_)) | ListStrategy::Replace => {
                continue;
            }
        };
        if let (Some(Value::Object(property)), Value::Object(ext)) =
            (property_mut(&mut defs, &root, path, ref_prefix), extensions)
        {
            property.extend(ext);
        }
    }
    defs
}

/// The property schema at dotted `path` under definition `root`, following references and
/// array items.
fn property_mut<'a>(
    defs: &'a mut Map<String, Value>,
    root: &str,
    path: &str,
    ref_prefix: &str,
) -> Option<&'a mut Value> {
    let segments: Vec<&str> = path.split('.').collect();
    let mut def = root.to_owned();
    for (i, seg) in segments.iter().enumerate() {
        let property = defs.get(&def)?.get("properties")?.get(*seg)?;
        if i + 1 == segments.len() {
            return defs.get_mut(&def)?.get_mut("properties")?.get_mut(*seg);
        }
        let target = property.get("items").unwrap_or(property);
        def = target.get("$ref")?.as_str()?.strip_prefix(ref_prefix)?.to_owned();
    }
    None
}

/// OpenAPI 3.0 ignores a `$ref`'s siblings; the apiserver writes `allOf: [{$ref}]` beside a
/// description or default, so that `kubectl explain` shows the field's own description.
fn wrap_ref_siblings(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.len() > 1
                && let Some(r) = m.remove("$ref")
            {
                m.insert("allOf".into(), json!([{"$ref": r}]));
            }
            m.values_mut().for_each(wrap_ref_siblings);
        }
        Value::Array(a) => a.iter_mut().for_each(wrap_ref_siblings),
        _ => {}
    }
}

/// A query parameter, in v2 or v3 form.
fn query(name: &str, kind: &str, description: &str, v3: bool) -> Value {
    if v3 {
        json!({"name": name, "in": "query", "description": description, "schema": {"type": kind, "uniqueItems": true}})
    } else {
        json!({"name": name, "in": "query", "description": description, "type": kind, "uniqueItems": true})
    }
}

fn path_param(name: &str, v3: bool) -> Value {
    if v3 {
        json!({"name": name, "in": "path", "required": true, "schema": {"type": "string", "uniqueItems": true}})
    } else {
        json!({"name": name, "in": "path", "required": true, "type": "string", "uniqueItems": true})
    }
}

fn response(reference: &str, v3: bool) -> Value {
    if v3 {
        json!({"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{reference}")}}}})
    } else {
        json!({"description": "OK", "schema": {"$ref": format!("#/definitions/{reference}")}})
    }
}

/// The write parameters every mutating operation takes.
fn write_params(v3: bool, patch: bool) -> Vec<Value> {
    let mut out = vec![
        query(
            "dryRun",
            "string",
            "When present, indicates that modifications should not be persisted.",
            v3,
        ),
        query(
            "fieldManager",
            "string",
            "A name associated with the actor or entity that is making these changes.",
            v3,
        ),
        query(
            "fieldValidation",
            "string",
            "How the server treats fields the object's schema does not know: Ignore, Warn or Strict.",
            v3,
        ),
    ];
    if patch {
        out.push(query(
            "force",
            "boolean",
            "Force is going to \"force\" Apply requests.",
            v3,
        ));
    }
    out
}

/// One operation of a path: its verb (for the operation id), `x-kubernetes-action`,
/// parameters, the definition it answers with and the one its body is, if any.
struct Op<'a> {
    verb: &'a str,
    action: &'a str,
    params: Vec<Value>,
    responds: &'a str,
    body: Option<&'a str>,
}

fn operation(k: &Kind, r: &KindSpec, op: Op<'_>, v3: bool) -> Value {
    let Op {
        verb,
        action,
        params,
        responds,
        body,
    } = op;
    let scope = if r.namespaced { "Namespaced" } else { "" };
    let mut op = json!({
        "operationId": format!("{verb}{}{}{scope}{}", title(k.group), title(k.version), k.kind),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(k),
        "parameters": params,
        "responses": {"200": response(responds, v3), "401": {"description": "Unauthorized"}},
        "consumes": ["*/*"],
        "produces": ["application/json"],
    });
    if let Some(body) = body {
        let media: &[&str] = if body == PATCH {
            &[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
                "application/apply-patch+yaml",
            ]
        } else {
            &["*/*"]
        };
        if v3 {
            let content: Map<String, Value> = media
                .iter()
                .map(|m| {
                    (
                        (*m).to_owned(),
                        json!({"schema": {"$ref": format!("#/components/schemas/{body}")}}),
                    )
                })
                .collect();
            op["requestBody"] = json!({"required": true, "content": content});
        } else {
            let Some(Value::Array(params)) = op.get_mut("parameters") else {
                unreachable!("set above");
            };
            params.push(json!({"name": "body", "in": "body", "required": true, "schema": {"$ref": format!("#/definitions/{body}")}}));
            op["consumes"] = json!(media);
        }
    }
    if v3 && let Some(m) = op.as_object_mut() {
        m.remove("consumes");
        m.remove("produces");
    }
    op
}

fn title(s: &str) -> String {
    s.split(['.', '/'])
        .next()
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .unwrap_or_default()
}

/// The paths of the served resources: the collection (list, create, delete collection), the
/// object (read, replace, patch, delete) and, for namespaced ones, the list across namespaces.
fn paths(served: &[(Kind<'_>, &KindSpec)], v3: bool) -> Value {
    let mut out = Map::new();
    for (k, r) in served {
        let prefix = if k.group.is_empty() {
            format!("/api/{}", k.version)
        } else {
            format!("/apis/{}/{}", k.group, k.version)
        };
        let res = &r.plural;
        let (collection, ns_params) = if r.namespaced {
            (
                format!("{prefix}/namespaces/{{namespace}}/{res}"),
                vec![path_param("namespace", v3)],
            )
        } else {
            (format!("{prefix}/{res}"), Vec::new())
        };
        let list = format!("{}List", k.definition);
        let list_params = vec![
            query(
                "labelSelector",
                "string",
                "A selector to restrict the list of returned objects by their labels.",
                v3,
            ),
            query(
                "fieldSelector",
                "string",
                "A selector to restrict the list of returned objects by their fields.",
                v3,
            ),
            query(
                "limit",
                "integer",
                "The maximum number of responses to return for a list call.",
                v3,
            ),
            query(
                "continue",
                "string",
                "The continue option should be set when retrieving more results from the server.",
                v3,
            ),
            query(
                "resourceVersion",
                "string",
                "resourceVersion sets a constraint on what resource versions a request may be served from.",
                v3,
            ),
            query(
                "resourceVersionMatch",
                "string",
                "How resourceVersion is applied to list calls.",
                v3,
            ),
            query(
                "sendInitialEvents",
                "boolean",
                "Streams the initial state before the changes of a watch.",
                v3,
            ),
            query(
                "watch",
                "boolean",
                "Watch for changes to the described resources.",
                v3,
            ),
            query(
                "allowWatchBookmarks",
                "boolean",
                "Requests watch events with type BOOKMARK.",
                v3,
            ),
            query(
                "timeoutSeconds",
                "integer",
                "Timeout for the list/watch call.",
                v3,
            ),
        ];
        out.insert(
            collection.clone(),
            json!({
                "parameters": ns_params,
                "get": operation(k, r, Op { verb: "list", action: "list", params: list_params.clone(), responds: &list, body: None }, v3),
                "post": operation(k, r, Op { verb: "create", action: "post", params: write_params(v3, false), responds: k.definition, body: Some(k.definition) }, v3),
                "delete": operation(k, r, Op { verb: "deletecollection", action: "deletecollection", params: list_params.clone(), responds: STATUS, body: Some(DELETE_OPTIONS) }, v3),
            }),
        );
        let mut object_params = ns_params.clone();
        object_params.insert(0, path_param("name", v3));
        out.insert(
            format!("{collection}/{{name}}"),
            json!({
                "parameters": object_params,
                "get": operation(k, r, Op { verb: "read", action: "get", params: Vec::new(), responds: k.definition, body: None }, v3),
                "put": operation(k, r, Op { verb: "replace", action: "put", params: write_params(v3, false), responds: k.definition, body: Some(k.definition) }, v3),
                "patch": operation(k, r, Op { verb: "patch", action: "patch", params: write_params(v3, true), responds: k.definition, body: Some(PATCH) }, v3),
                "delete": operation(k, r, Op { verb: "delete", action: "delete", params: write_params(v3, false), responds: k.definition, body: Some(DELETE_OPTIONS) }, v3),
            }),
        );
        if r.namespaced {
            out.insert(
                format!("{prefix}/{res}"),
                json!({"get": operation(k, r, Op { verb: "list", action: "list", params: list_params, responds: &list, body: None }, v3)}),
            );
        }
    }
    Value::Object(out)
}

/// Walks the object `fields` against `schema`, removing the fields the schema does not know
/// and collecting their paths.
fn prune(
    defs: &Map<String, Value>,
    schema: &Value,
    fields: &mut Map<String, Value>,
    path: &str,
    out: &mut Vec<String>,
) {
    let schema = resolve(defs, schema);
    if schema
        .get("x-kubernetes-preserve-unknown-fields")
        .is_some_and(|v| v == true)
    {
        return;
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    if properties.is_none() && additional.is_none() {
        return; // a free-form object (`type: object` alone)
    }
    let mut unknown = Vec::new();
    for (k, v) in fields.iter_mut() {
        let field_path = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        match (properties.and_then(|p| p.get(k)), additional) {
            (Some(s), _) | (None, Some(s)) => prune_value(defs, s, v, &field_path, out),
            (None, None) => {
                out.push(field_path);
                unknown.push(k.clone());
            }
        }
    }
    for k in unknown {
        fields.remove(&k);
    }
}

fn prune_value(
    defs: &Map<String, Value>,
    schema: &Value,
    value: &mut Value,
    path: &str,
    out: &mut Vec<String>,
) {
    match value {
        Value::Object(fields) => prune(defs, schema, fields, path, out),
        Value::Array(items) => {
            if let Some(item_schema) = resolve(defs, schema).get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_value(defs, item_schema, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// `schema`, or the definition it references (directly or as `allOf`'s only element).
fn resolve<'a>(defs: &'a Map<String, Value>, schema: &'a Value) -> &'a Value {
    let mut at = schema;
    for _ in 0..8 {
        let reference = at
            .get("$ref")
            .or_else(|| at.get("allOf").and_then(|a| a.get(0)).and_then(|a| a.get("$ref")))
            .and_then(Value::as_str);
        let Some(name) = reference.and_then(|r| r.rsplit('/').next()) else {
            return at;
        };
        match defs.get(name) {
            Some(def) => at = def,
            None => return at,
        }
    }
    at
}
