//! Request handling: LIST, GET and WATCH from the caches; POST, PUT and DELETE to the source,
//! whose changes reach every watcher through the caches, never around them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use serde_json::{Map, Value};
use watchcache_core::{Codec, ObjectKey, Revision, SourceError, WireFormat};
use watchcache_encoders::{Status, StreamingList};

use crate::AppState;
use crate::metrics;
use crate::params::Params;
use crate::resources::Resource;
use crate::watch_body::{WatchBody, WatchCounters, WatcherGuard};

/// A Status as an HTTP response.
pub(crate) fn status_response(s: &Status) -> Response {
    let mut r = (
        StatusCode::from_u16(s.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        s.to_json(),
    )
        .into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(secs) = s.retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    r
}

pub(crate) fn json_response(code: StatusCode, body: impl Into<Body>) -> Response {
    let mut r = (code, body.into()).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// What a request addresses.
pub(crate) struct Target {
    pub(crate) resource: Arc<Resource>,
    pub(crate) namespace: Option<String>,
    pub(crate) name: Option<String>,
}

pub(crate) fn target(
    state: &AppState,
    resource: &str,
    namespace: Option<String>,
    name: Option<String>,
) -> Result<Target, Status> {
    let Some(r) = state.resources.get(resource) else {
        return Err(Status::not_found(resource, ""));
    };
    if namespace.is_some() && !r.namespaced {
        return Err(Status::not_found(resource, ""));
    }
    Ok(Target {
        resource: Arc::clone(r),
        namespace,
        name,
    })
}

pub(crate) async fn handle(
    state: Arc<AppState>,
    method: Method,
    t: Target,
    query: Option<String>,
    body: Bytes,
) -> Response {
    let result = match (method, &t.name) {
        (Method::GET, None) => match Params::parse(query.as_deref()) {
            Ok(p) if p.watch => watch(&state, &t, &p).await,
            Ok(p) => list(&state, &t, &p).await,
            Err(s) => Err(s),
        },
        (Method::GET, Some(name)) => get(&t, name, query.as_deref()).await,
        (Method::POST, None) => create(&state, &t, &body).await,
        (Method::PUT, Some(name)) => update(&state, &t, name, &body).await,
        (Method::DELETE, Some(name)) => delete(&state, &t, name).await,
        (m, _) => Err(Status::method_not_allowed(format!(
            "method {m} is not supported on this path"
        ))),
    };
    result.unwrap_or_else(|s| status_response(&s))
}

async fn list(state: &AppState, t: &Target, p: &Params) -> Result<Response, Status> {
    let r = &t.resource;
    let opts = p.list_options(t.namespace.as_deref())?;
    let result = r
        .cache
        .list(&opts)
        .await
        .map_err(|e| Status::from_cache_error(&e))?;
    let labels = metrics::resource(&r.info.resource);
    state.metrics.list_requests.get_or_create(&labels).inc();
    let bytes_counter = state.metrics.list_bytes.get_or_create(&labels).clone();
    let body = StreamingList::of(&r.info, result, r.codec.clone()).map(move |chunk| {
        let chunk = chunk.map_err(std::io::Error::other)?;
        bytes_counter.inc_by(chunk.len() as u64);
        Ok::<_, std::io::Error>(chunk)
    });
    Ok(json_response(StatusCode::OK, Body::from_stream(body)))
}

async fn get(t: &Target, name: &str, query: Option<&str>) -> Result<Response, Status> {
    let r = &t.resource;
    let p = Params::parse(query)?;
    let key = ObjectKey::new(t.namespace.clone().unwrap_or_default(), name);
    let (object, _) = r
        .cache
        .get(&key, p.resource_version)
        .await
        .map_err(|e| Status::from_cache_error(&e))?;
    let object = object.ok_or_else(|| Status::not_found(&r.info.resource, name))?;
    let json = object
        .encoding(WireFormat::Json, &*r.codec)
        .map_err(|e| Status::internal(e.to_string()))?;
    Ok(json_response(StatusCode::OK, json.bytes().clone()))
}

async fn watch(state: &Arc<AppState>, t: &Target, p: &Params) -> Result<Response, Status> {
    let r = &t.resource;
    let opts = p.watch_options(t.namespace.as_deref())?;
    if state.open_watchers.fetch_add(1, Ordering::Relaxed) >= state.config.max_watchers {
        state.open_watchers.fetch_sub(1, Ordering::Relaxed);
        return Err(Status::too_many_requests(
            "too many open watches",
            Duration::from_secs(1),
        ));
    }
    let resource: &'static str = state
        .resources
        .get_key_value(r.info.resource.as_str())
        .map_or("", |(k, _)| *k);
    state
        .metrics
        .watchers
        .get_or_create(&metrics::resource(resource))
        .inc();
    let guard = WatcherGuard {
        metrics: state.metrics.clone(),
        resource,
        open: state.open_watchers.clone(),
    };
    let (watch, pending) = match r.cache.watch(opts).await {
        Ok(w) => (Some(w), None),
        // Too old: HTTP 200, then an ERROR event with a 410 Status (clients re-list on it).
        Err(e @ watchcache_core::CacheError::Expired(_)) => {
            let mut buf = BytesMut::new();
            r.frames.write_error(&Status::from_cache_error(&e), &mut buf);
            (None, Some(buf.freeze()))
        }
        Err(e) => return Err(Status::from_cache_error(&e)),
    };
    // The apiserver's default: a random 30 to 60 minutes, so reconnections spread out.
    let timeout = p
        .timeout
        .unwrap_or_else(|| Duration::from_secs(1800 + fastrand::u64(0..1800)));
    let body = WatchBody {
        watch,
        frames: r.frames.clone(),
        deadline: Box::pin(tokio::time::sleep(timeout)),
        shutdown: Box::pin(state.shutdown.clone().cancelled_owned()),
        counters: WatchCounters::new(&state.metrics, resource),
        pending,
        guard: Some(guard),
    };
    Ok(json_response(StatusCode::OK, Body::from_stream(body)))
}

/// Parses a request body into a JSON object of this resource at `namespace` and `name`.
fn object_from_body(
    t: &Target,
    body: &[u8],
    name_from_path: Option<&str>,
) -> Result<Map<String, Value>, Status> {
    let r = &t.resource;
    let value: Value =
        serde_json::from_slice(body).map_err(|e| Status::bad_request(format!("invalid JSON body: {e}")))?;
    let Value::Object(mut object) = value else {
        return Err(Status::bad_request("the body is not a JSON object"));
    };
    for (field, want) in [("kind", &r.info.kind), ("apiVersion", &r.info.api_version)] {
        match object.get(field) {
            None => {
                object.insert(field.into(), Value::String(want.clone()));
            }
            Some(Value::String(s)) if s == want => {}
            Some(other) => {
                return Err(Status::bad_request(format!(
                    "{field} {other} does not match {want:?}"
                )));
            }
        }
    }
    let meta = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else {
        return Err(Status::bad_request("metadata is not an object"));
    };
    match (meta.get("namespace"), &t.namespace) {
        (Some(Value::String(ns)), Some(path_ns)) if ns != path_ns => {
            return Err(Status::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        (_, Some(path_ns)) => {
            meta.insert("namespace".into(), Value::String(path_ns.clone()));
        }
        (Some(_), None) if !r.namespaced => {
            return Err(Status::bad_request(format!(
                "{} are not namespaced",
                r.info.resource
            )));
        }
        (_, None) if r.namespaced => {
            return Err(Status::bad_request(format!(
                "{} must be created in a namespace",
                r.info.resource
            )));
        }
        _ => {}
    }
    let name = match (meta.get("name"), meta.get("generateName"), name_from_path) {
        (Some(Value::String(n)), _, Some(path)) if n != path => {
            return Err(Status::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({path})"
            )));
        }
        (Some(Value::String(n)), _, _) if !n.is_empty() => n.clone(),
        (_, _, Some(path)) => path.to_owned(),
        (_, Some(Value::String(prefix)), None) if !prefix.is_empty() => {
            let suffix: String = (0..5)
                .map(|_| fastrand::alphanumeric().to_ascii_lowercase())
                .collect();
            format!("{prefix}{suffix}")
        }
        _ => {
            return Err(Status::invalid(
                "metadata.name: Required value: name or generateName is required",
            ));
        }
    };
    if !is_dns_subdomain(&name) {
        return Err(Status::invalid(format!(
            "metadata.name: Invalid value: {name:?}: must be a lowercase RFC 1123 subdomain"
        )));
    }
    meta.insert("name".into(), Value::String(name));
    Ok(object)
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

fn name_of(object: &Map<String, Value>) -> String {
    object["metadata"]["name"].as_str().unwrap_or_default().to_owned()
}

fn source_key(t: &Target, name: &str) -> String {
    ObjectKey::new(t.namespace.clone().unwrap_or_default(), name).to_source_key(&t.resource.prefix)
}

/// The object as stored at `revision`, encoded as every reader will see it.
fn stored(t: &Target, raw: &[u8], revision: Revision) -> Result<Bytes, Status> {
    let r = &t.resource;
    let v = r
        .codec
        .decode(raw, revision)
        .map_err(|e| Status::internal(e.to_string()))?;
    let json = v
        .encoded(WireFormat::Json)
        .ok_or_else(|| Status::internal("no JSON encoding"))?;
    Ok(json.bytes().clone())
}

async fn create(state: &AppState, t: &Target, body: &[u8]) -> Result<Response, Status> {
    let mut object = object_from_body(t, body, None)?;
    let name = name_of(&object);
    let meta = object
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| Status::internal("no metadata"))?;
    meta.remove("resourceVersion");
    meta.insert("uid".into(), Value::String(uid()));
    meta.insert(
        "creationTimestamp".into(),
        Value::String(humantime::format_rfc3339_seconds(SystemTime::now()).to_string()),
    );
    let raw = serde_json::to_vec(&object).map_err(|e| Status::internal(e.to_string()))?;
    // Check the object decodes before it is stored: the cache would have to skip it.
    t.resource
        .codec
        .decode(&raw, Revision::new(1))
        .map_err(|e| Status::invalid(e.to_string()))?;
    let key = source_key(t, &name);
    let revision = state
        .store
        .create(&key, Bytes::from(raw.clone()))
        .map_err(|e| Status::from_source_error(&e, &t.resource.info.resource, &name))?;
    Ok(json_response(StatusCode::CREATED, stored(t, &raw, revision)?))
}

async fn update(state: &AppState, t: &Target, name: &str, body: &[u8]) -> Result<Response, Status> {
    let mut object = object_from_body(t, body, Some(name))?;
    let resource = &t.resource.info.resource;
    let key = source_key(t, name);
    let (current, _) = state
        .store
        .get(&key)
        .ok_or_else(|| Status::not_found(resource, name))?;
    let current: Value = serde_json::from_slice(&current).map_err(|e| Status::internal(e.to_string()))?;
    let meta = object
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| Status::internal("no metadata"))?;
    // Optimistic concurrency on metadata.resourceVersion, when the client sends one.
    let expected = match meta.remove("resourceVersion") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(
            Revision::parse(&s).map_err(|e| Status::bad_request(format!("metadata.resourceVersion: {e}")))?,
        ),
        Some(other) => {
            return Err(Status::bad_request(format!(
                "metadata.resourceVersion {other} is not a string"
            )));
        }
    };
    // The server owns uid and creationTimestamp.
    for field in ["uid", "creationTimestamp"] {
        if let Some(v) = current["metadata"].get(field) {
            meta.insert(field.into(), v.clone());
        }
    }
    let raw = serde_json::to_vec(&object).map_err(|e| Status::internal(e.to_string()))?;
    t.resource
        .codec
        .decode(&raw, Revision::new(1))
        .map_err(|e| Status::invalid(e.to_string()))?;
    let revision = state
        .store
        .update(&key, Bytes::from(raw.clone()), expected)
        .map_err(|e| Status::from_source_error(&e, resource, name))?;
    Ok(json_response(StatusCode::OK, stored(t, &raw, revision)?))
}

async fn delete(state: &AppState, t: &Target, name: &str) -> Result<Response, Status> {
    let resource = &t.resource.info.resource;
    let key = source_key(t, name);
    // Delete exactly the version we answer with; a concurrent update makes us look again.
    for _ in 0..8 {
        let (_, revision) = state
            .store
            .get(&key)
            .ok_or_else(|| Status::not_found(resource, name))?;
        match state.store.delete(&key, Some(revision)) {
            Ok((_, prev)) => return Ok(json_response(StatusCode::OK, stored(t, &prev, revision)?)),
            Err(SourceError::Conflict { .. }) => continue,
            Err(e) => return Err(Status::from_source_error(&e, resource, name)),
        }
    }
    Err(Status::conflict(resource, name))
}

fn uid() -> String {
    uuid::Uuid::new_v4().to_string()
}
