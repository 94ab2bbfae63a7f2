//! `pods/eviction`: a `policy/v1` Eviction deletes the pod, unless a PodDisruptionBudget
//! covering it forbids it (429, as the apiserver answers: the budget's controller has not
//! processed it yet, or it allows no disruption now). An eviction a budget allows takes one
//! disruption from it (its `status.disruptionsAllowed`, and the pod in `disruptedPods`) before
//! the pod goes, so two evictions never both spend the last one.
//!
//! No disruption controller runs here: a budget's status is whatever its writers set.

use std::time::SystemTime;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};
use watchcache_core::{Filter, ObjectKey, Revision, SourceError, WireFormat};
use watchcache_encoders::Status;

use crate::handlers::app::AppState;
use crate::handlers::errors;
use crate::handlers::params::{DeleteParams, WriteParams};
use crate::handlers::response::json_response;
use crate::handlers::target::Target;
use crate::handlers::writes;

/// The OpenAPI definition of an Eviction, whose protobuf message a protobuf body is.
pub(crate) const EVICTION: &str = "io.k8s.api.policy.v1.Eviction";

/// How many times taking a disruption is tried again after losing a race for the budget.
const ATTEMPTS: usize = 5;

/// The 429 of an eviction a budget forbids, with the apiserver's message and cause.
fn refused(cause: String) -> Status {
    let mut s = Status::new(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
    );
    s.details = Some(json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]}));
    s
}

fn int(v: &Value, path: &[&str]) -> i64 {
    path.iter()
        .try_fold(v, |v, k| v.get(*k))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// POST `pods/<name>/eviction` with an Eviction `body`.
pub(crate) async fn evict(
    state: &AppState,
    t: &Target,
    name: &str,
    p: &WriteParams,
    body: &[u8],
) -> Result<Response, Status> {
    let eviction: Value = serde_json::from_slice(body)
        .map_err(|e| Status::bad_request(format!("the body is not an Eviction: {e}")))?;
    if let Some(named) = eviction["metadata"]["name"].as_str()
        && named != name
    {
        return Err(Status::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    let options = match &eviction["deleteOptions"] {
        Value::Null => Vec::new(),
        o => o.to_string().into_bytes(),
    };
    let mut delete = DeleteParams::parse(None, &options)?;
    // A dry run asked for in the Eviction's delete options (kubectl drain --dry-run=server)
    // or in the URL.
    let dry_run = delete.write.dry_run || p.dry_run;
    delete.write = WriteParams { dry_run, ..p.clone() };
    let pod_key = t.storage_key(name);
    let (raw, _) = state
        .store
        .get(&pod_key)
        .await
        .map_err(|e| errors::source(&e, "pods", name))?
        .ok_or_else(|| Status::not_found("pods", name))?;
    let pod: Value =
        serde_json::from_slice(&raw).map_err(|e| errors::corrupt_object(&pod_key, &e.to_string()))?;
    // A pod that is done, not yet running, or going already needs no budget's leave.
    let phase = pod["status"]["phase"].as_str().unwrap_or_default();
    let exempt = matches!(phase, "Succeeded" | "Failed" | "Pending")
        || !pod["metadata"]["deletionTimestamp"].is_null();
    if !exempt {
        take_disruption(state, t, name, &pod, dry_run).await?;
    }
    let object = Target {
        resource: t.resource.clone(),
        namespace: t.namespace.clone(),
        name: t.name.clone(),
        subresource: None,
    };
    writes::delete(state, &object, name, &delete).await?;
    Ok(json_response(
        StatusCode::CREATED,
        Status::success_body(Some(201), None),
    ))
}

/// The budgets of the pod's namespace that select it, as the cache has them.
async fn budgets(state: &AppState, namespace: &str, pod: &Value) -> Result<Vec<Value>, Status> {
    let Some(pdbs) = state.resources.get("policy/v1", "poddisruptionbudgets") else {
        return Ok(Vec::new());
    };
    let opts = watchcache_core::ListOptions {
        filter: Filter::parse(Some(namespace), "", "").map_err(|e| Status::internal(e.to_string()))?,
        resource_version: Some(Revision::ZERO),
        ..Default::default()
    };
    let list = pdbs
        .cache
        .list(&opts)
        .await
        .map_err(|e| Status::internal(e.to_string()))?;
    let labels: Map<String, Value> = pod["metadata"]["labels"].as_object().cloned().unwrap_or_default();
    let mut out = Vec::new();
    for item in list.items {
        let Ok(json) = item.encoding(WireFormat::Json, &*pdbs.codec) else {
            continue;
        };
        let Ok(pdb) = serde_json::from_slice::<Value>(json.bytes()) else {
            continue;
        };
        // A budget with an empty (or no) selector selects no pod, as in policy/v1.
        let selector = watchcache_api::printers::selector_text(&pdb["spec"]["selector"]);
        if selector.is_empty() {
            continue;
        }
        let Ok(filter) = Filter::parse(None, &selector, "") else {
            continue;
        };
        let probe =
            watchcache_core::ObjectVersion::builder(ObjectKey::new(namespace, "probe"), Revision::new(1))
                .labels(
                    labels
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default())),
                )
                .build();
        if filter.matches(&probe) {
            out.push(pdb);
        }
    }
    Ok(out)
}

/// Takes one disruption from the budget covering `pod`, if any: refused (429) when it allows
/// none or has not been processed. A dry run checks the budget and writes nothing.
async fn take_disruption(
    state: &AppState,
    t: &Target,
    name: &str,
    pod: &Value,
    dry_run: bool,
) -> Result<(), Status> {
    let namespace = t.namespace.as_deref().unwrap_or_default();
    let covering = budgets(state, namespace, pod).await?;
    let pdb = match covering.as_slice() {
        [] => return Ok(()),
        [one] => one,
        _ => {
            return Err(Status::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
    };
    let pdb_name = pdb["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    let key = format!("/registry/poddisruptionbudgets/{namespace}/{pdb_name}");
    for _ in 0..ATTEMPTS {
        let Some((raw, revision)) = state
            .store
            .get(&key)
            .await
            .map_err(|e| errors::source(&e, "poddisruptionbudgets", &pdb_name))?
        else {
            return Ok(()); // gone meanwhile: nothing forbids the eviction
        };
        let mut pdb: Value =
            serde_json::from_slice(&raw).map_err(|e| errors::corrupt_object(&key, &e.to_string()))?;
        if int(&pdb, &["status", "observedGeneration"]) < int(&pdb, &["metadata", "generation"])
            || pdb["status"].is_null()
        {
            return Err(refused(format!(
                "The disruption budget {pdb_name} is still being processed by the server."
            )));
        }
        if int(&pdb, &["status", "disruptionsAllowed"]) <= 0 {
            return Err(refused(format!(
                "The disruption budget {pdb_name} needs {} healthy pods and has {} currently",
                int(&pdb, &["status", "desiredHealthy"]),
                int(&pdb, &["status", "currentHealthy"])
            )));
        }
        if dry_run {
            return Ok(());
        }
        let allowed = int(&pdb, &["status", "disruptionsAllowed"]) - 1;
        pdb["status"]["disruptionsAllowed"] = json!(allowed);
        let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
        if !pdb["status"]["disruptedPods"].is_object() {
            pdb["status"]["disruptedPods"] = json!({});
        }
        pdb["status"]["disruptedPods"][name] = json!(now);
        match state
            .store
            .update(&key, pdb.to_string().into(), Some(revision))
            .await
        {
            Ok(_) => return Ok(()),
            Err(SourceError::Conflict { .. }) => continue,
            Err(e) => return Err(errors::source(&e, "poddisruptionbudgets", &pdb_name)),
        }
    }
    Err(Status::conflict("poddisruptionbudgets", &pdb_name))
}
