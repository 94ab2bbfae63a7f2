//! `/scale`: an `autoscaling/v1` Scale over an object's replica count, for the kinds whose
//! declaration names where it is ([`ScalePaths`]): what `kubectl scale` and autoscalers read
//! and write.
//!
//! A GET reads the object from the store and answers its Scale. A PUT takes a Scale; a PATCH
//! (JSON, merge or strategic) is applied to the current Scale. Either then writes the new
//! replica count into the object as a merge patch of the object itself, with the Scale's
//! `resourceVersion` as its precondition when it names one, and answers the object's Scale
//! after the write.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};
use watchcache_api::ScalePaths;
use watchcache_encoders::Status;

use crate::handlers::app::AppState;
use crate::handlers::errors;
use crate::handlers::params::WriteParams;
use crate::handlers::response::json_response;
use crate::handlers::target::Target;
use crate::handlers::writes;
use watchcache_api::mutation::patch::{Patch, PatchType};
use watchcache_api::mutation::strategic::ListRules;

/// The OpenAPI definition of a Scale, whose protobuf message answers protobuf clients.
pub(crate) const SCALE: &str = "io.k8s.api.autoscaling.v1.Scale";

fn at<'a>(object: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    let (first, rest) = path.split_once('.').unwrap_or((path, ""));
    rest.split('.')
        .filter(|p| !p.is_empty())
        .try_fold(object.get(first)?, |v, p| v.get(p))
}

/// The Scale of `object` (its metadata's identity and version, its replicas and selector).
pub(crate) fn scale_of(object: &Map<String, Value>, paths: &ScalePaths) -> Value {
    let meta = object.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let mut metadata = Map::new();
    for field in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"] {
        if let Some(v) = meta.get(field) {
            metadata.insert(field.into(), v.clone());
        }
    }
    let replicas = |path: &str| at(object, path).and_then(Value::as_i64).unwrap_or(0);
    let mut status = json!({"replicas": replicas(&paths.status_replicas)});
    if let Some(selector) = paths.label_selector.as_deref().and_then(|p| at(object, p)) {
        let selector = watchcache_api::printers::selector_text(selector);
        if !selector.is_empty() {
            status["selector"] = json!(selector);
        }
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": replicas(&paths.spec_replicas)},
        "status": status,
    })
}

fn paths(t: &Target) -> Result<&ScalePaths, Status> {
    t.resource
        .spec
        .subresources
        .scale
        .as_ref()
        .ok_or_else(|| Status::not_found(&format!("{}/scale", t.resource.info.resource), ""))
}

/// The object `name` as stored, with its resourceVersion.
async fn read(state: &AppState, t: &Target, name: &str) -> Result<Map<String, Value>, Status> {
    let resource = &t.resource.info.resource;
    let (raw, revision) = state
        .store
        .get(&t.storage_key(name))
        .await
        .map_err(|e| errors::source(&e, resource, name))?
        .ok_or_else(|| Status::not_found(resource, name))?;
    let mut object = t
        .resource
        .codec
        .stored_object(&raw)
        .map_err(|e| errors::corrupt_object(&t.storage_key(name), &e.to_string()))?;
    if let Some(Value::Object(meta)) = object.get_mut("metadata") {
        meta.insert("resourceVersion".into(), json!(revision.to_string()));
    }
    Ok(object)
}

/// GET `…/<name>/scale`.
pub(crate) async fn get(state: &AppState, t: &Target, name: &str) -> Result<Response, Status> {
    let paths = paths(t)?;
    let object = read(state, t, name).await?;
    Ok(json_response(
        StatusCode::OK,
        scale_of(&object, paths).to_string(),
    ))
}

/// PUT `…/<name>/scale` with a Scale (`patch: None`), or PATCH it with `patch`.
pub(crate) async fn write(
    state: &AppState,
    t: &Target,
    name: &str,
    p: &WriteParams,
    body: &[u8],
    patch: Option<PatchType>,
) -> Result<Response, Status> {
    if patch == Some(PatchType::Strategic) && !t.resource.spec.serves_strategic_merge() {
        return Err(errors::no_strategic_merge());
    }
    let paths = paths(t)?;
    let current = scale_of(&read(state, t, name).await?, paths);
    let Value::Object(current_map) = current.clone() else {
        unreachable!("a Scale is an object")
    };
    let wanted = match patch {
        None => serde_json::from_slice::<Value>(body)
            .map_err(|e| Status::bad_request(format!("the body is not a Scale: {e}")))?,
        Some(PatchType::Apply) => {
            return Err(Status::new(
                415,
                "UnsupportedMediaType",
                "server-side apply is not served on /scale: use a JSON, merge or strategic merge patch",
            ));
        }
        Some(ty) => Value::Object(Patch::parse(ty, body)?.apply_to(ListRules::Atomic, current_map)?),
    };
    let replicas = match wanted.pointer("/spec/replicas") {
        None | Some(Value::Null) => 0,
        Some(v) => v
            .as_i64()
            .filter(|n| (0..=i64::from(i32::MAX)).contains(n))
            .ok_or_else(|| {
                errors::invalid_field(
                    "Scale",
                    "autoscaling",
                    name,
                    "spec.replicas",
                    v.clone(),
                    "must be greater than or equal to 0",
                )
            })?,
    };
    // The Scale's resourceVersion is the object's: a precondition when the client names one
    // (a PUT's, or one a patch sets; not the one the patch was shown).
    let mut object_patch = Map::new();
    let shown = current
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str);
    let wanted_version = wanted
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|v| patch.is_none() || Some(*v) != shown);
    if let Some(v) = wanted_version.filter(|v| !v.is_empty() && *v != "0") {
        object_patch.insert("metadata".into(), json!({"resourceVersion": v}));
    }
    set_path(&mut object_patch, &paths.spec_replicas, json!(replicas));
    let object = Target {
        resource: t.resource.clone(),
        namespace: t.namespace.clone(),
        name: t.name.clone(),
        subresource: None,
    };
    let body = Value::Object(object_patch).to_string();
    let response = writes::patch(state, &object, name, p, PatchType::Merge, body.as_bytes()).await?;
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .map_err(|_| Status::internal("a write's answer could not be read"))?;
    let written: Map<String, Value> = serde_json::from_slice(&bytes)
        .map_err(|e| Status::internal(format!("a write's answer is not JSON: {e}")))?;
    Ok(json_response(
        StatusCode::OK,
        scale_of(&written, paths).to_string(),
    ))
}

fn set_path(object: &mut Map<String, Value>, path: &str, value: Value) {
    let mut parts: Vec<&str> = path.split('.').collect();
    let Some(last) = parts.pop() else { return };
    let mut at = object;
    for part in parts {
        let Some(next) = at
            .entry(part)
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
        else {
            return;
        };
        at = next;
    }
    at.insert(last.into(), value);
}
