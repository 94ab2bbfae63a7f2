//! The write path: POST, PUT, PATCH (and apply), DELETE and DeleteCollection go to the
//! source, never to the cache; their changes reach every reader through the caches'
//! reflectors.
//!
//! Create and update share one sequence: the body becomes an object of the addressed
//! resource ([`object_from_body`]), the server sets what it owns, the object is serialised
//! once and decoded once by the resource's codec ([`encode`]; a refusal is 422 and nothing is
//! stored), stored, and answered with that decoded version's JSON stamped with the write's
//! revision ([`written`]), without decoding again.
//!
//! What a write goes through, one file each (what is converted on the way in, each kind
//! declares: [`Strategy::on_write`](watchcache_api::Strategy::on_write)): `generate_name.rs`, `namespaces.rs` (namespace lifecycle), `deletion.rs` (what a DELETE
//! does), `offload.rs` (writes on the blocking pool, bounded); and the subresources that write:
//! `scale.rs` and `eviction.rs`; `services.rs` allocates a Service's addresses.

pub(crate) mod deletion;
pub(crate) mod eviction;
pub(crate) mod generate_name;
pub(crate) mod namespaces;
pub(crate) mod offload;
pub(crate) mod scale;
pub(crate) mod services;

use std::time::SystemTime;

use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use serde_json::{Map, Value};
use watchcache_core::{Codec, ObjectVersion, Revision, SourceError, is_dns1123_label, is_dns1123_subdomain};
use watchcache_encoders::{ResourceInfo, Status};

use crate::auth;
use crate::handlers::app::AppState;
use crate::handlers::errors;
use crate::handlers::params::{DeleteParams, FieldValidation, Params, WriteParams};
use crate::handlers::response::json_response;
use crate::handlers::target::{Subresource, Target};
use crate::store::resources::NameRule;

use crate::store::stored;
use deletion::Deletion;
use watchcache_api::mutation::apply;
use watchcache_api::mutation::fields::{self, Manager, Writer};
use watchcache_api::mutation::patch::{Patch, PatchType};
use watchcache_api::validation;

pub(crate) async fn create(
    state: &AppState,
    t: &Target,
    p: &WriteParams,
    body: &[u8],
) -> Result<Response, Status> {
    if t.resource.terminating.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(Status::new(
            405,
            "MethodNotAllowed",
            "create not allowed while custom resource definition is terminating",
        ));
    }
    let body = parse_body(body)?;
    let generated = generate_name::prefix_of(&body).map(str::to_owned);
    let mut object = object_from_value(&addressed(t), body, None)?;
    let warnings = check_fields(state, t, p, &mut object)?;
    on_write(t, &mut object);
    set_defaults(t, &mut object)?;
    // The creator owns what it sent and the defaults; not the status, which the server resets
    // on a kind with /status (the apiserver's "reset fields").
    let mut owned = object.clone();
    if t.resource.spec.subresources.status {
        owned.remove("status");
    }
    let mut managers = Vec::new();
    fields::record_update(
        t.resource.spec.list_rules(),
        &mut managers,
        &Writer {
            manager: &p.manager,
            subresource: "",
            api_version: &t.resource.info.api_version,
            time: &now(),
        },
        &Map::new(),
        &owned,
    );
    initial_status(t, &mut object);
    prepare_create(t, &mut object, &managers)?;
    validate(t, &object, None, false)?;
    confirm_no_escalation(state, t, p, &object, None)?;
    let claims = services::allocate(state, t, &mut object, None).await?;
    let stored = store_new(state, t, p, object, generated, &warnings).await;
    let failed = stored.as_ref().err().map(|e| e.code);
    claims.after(state, failed, p.dry_run).await;
    stored
}

/// Stores a new `object`: drawing its name again while a generated one is taken, as the
/// apiserver does.
async fn store_new(
    state: &AppState,
    t: &Target,
    p: &WriteParams,
    mut object: Map<String, Value>,
    generated: Option<String>,
    warnings: &[String],
) -> Result<Response, Status> {
    let resource = &t.resource.info.resource;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (raw, version) = encode(t, &object)?;
        let name = version.key().name();
        let admitted = namespaces::check_creatable(state, t, name).await?;
        if p.dry_run {
            // Validated and answered as it would be stored; nothing is stored.
            return Ok(warn(json_response(StatusCode::CREATED, raw), warnings));
        }
        match (
            state
                .leases
                .create(&t.storage_key(name), raw, t.resource.ttl)
                .await,
            &generated,
        ) {
            (Ok(revision), _) => {
                namespaces::confirm_created(state, t, name, &admitted, revision).await?;
                return written(t, StatusCode::CREATED, &version, revision).map(|r| warn(r, warnings));
            }
            (Err(SourceError::AlreadyExists(_)), Some(prefix)) if attempt < generate_name::ATTEMPTS => {
                let name = generate_name::generate(prefix);
                check_names(&addressed(t), &name)?;
                metadata_mut(&mut object)?.insert("name".into(), Value::String(name));
            }
            (Err(SourceError::AlreadyExists(_)), Some(_)) => {
                return Err(errors::generated_name_taken(resource, name));
            }
            (Err(e), _) => return Err(errors::source(&e, resource, name)),
        }
    }
}

/// The defaults the apiserver fills in on a new object: its kind's declared defaults, then
/// its defaulting function.
fn set_defaults(t: &Target, object: &mut Map<String, Value>) -> Result<(), Status> {
    let strategy = &t.resource.spec.strategy;
    if let Some(schema) = &strategy.schema {
        // Defaults that would grow the object past what the store takes: refused as such an
        // object is.
        schema
            .apply_defaults(object)
            .map_err(|_| errors::defaults_too_large())?;
    }
    for (path, value) in &strategy.defaults {
        set_if_unset(object, path, value);
    }
    if let Some(default) = strategy.default {
        default(object);
    }
    Ok(())
}

/// What the apiserver sets as a new object's status, by its kind's strategy (a pod's
/// initial status, a namespace's phase and its `kubernetes` finalizer).
fn initial_status(t: &Target, object: &mut Map<String, Value>) {
    if let Some(initial) = t.resource.spec.strategy.initial_status {
        initial(object);
    }
}

/// Sets what the server owns on a new object: identity, creation time and `managedFields`;
/// the client's own values of these are ignored, as the apiserver ignores them.
fn prepare_create(t: &Target, object: &mut Map<String, Value>, managers: &[Manager]) -> Result<(), Status> {
    let meta = metadata_mut(object)?;
    for field in SERVER_OWNED {
        meta.remove(*field);
    }
    meta.insert("uid".into(), Value::String(uuid::Uuid::new_v4().to_string()));
    meta.insert("creationTimestamp".into(), Value::String(now()));
    if t.resource.spec.strategy.generation {
        meta.insert("generation".into(), Value::from(1));
    }
    fields::set_managers(object, managers, &t.resource.info.api_version);
    Ok(())
}

/// Metadata the server sets; a client's values are ignored.
const SERVER_OWNED: &[&str] = &[
    "resourceVersion",
    "generation",
    "uid",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Now, as `metav1.Time` writes it.
fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

pub(crate) async fn update(
    state: &AppState,
    t: &Target,
    name: &str,
    p: &WriteParams,
    body: &[u8],
) -> Result<Response, Status> {
    let mut object = object_from_body(&addressed(t), body, Some(name))?;
    let warnings = check_fields(state, t, p, &mut object)?;
    let resource = &t.resource.info.resource;
    let key = t.storage_key(name);
    // Optimistic concurrency on metadata.resourceVersion, when the client sends one.
    let expected = take_resource_version(metadata_mut(&mut object)?)?;
    // Without one, the update is still conditional on the version it was prepared from (the
    // status, deletion and generation it carries over are that version's), and starts again
    // from the newer one when another write came first, as the apiserver's unconditional
    // update does: never written blindly over a write it did not see.
    for _ in 0..ATTEMPTS {
        let (current, read_at) = state
            .store
            .get(&key)
            .await
            .map_err(|e| errors::source(&e, resource, name))?
            .ok_or_else(|| Status::not_found(resource, name))?;
        if expected.is_some_and(|e| e != read_at) {
            return Err(Status::conflict(resource, name));
        }
        let current = parse_stored(t, name, &current)?;
        let ownership = Ownership::Update(&p.manager);
        let mut object = object.clone();
        let claims = services::allocate(state, t, &mut object, Some(&current)).await?;
        let prepared = match prepare_update(state, p, t, object, &current, ownership, false) {
            Ok(prepared) => prepared,
            Err(e) => {
                claims.release(state).await;
                return Err(e);
            }
        };
        if p.dry_run {
            claims.release(state).await;
            // As it would be stored, at the stored object's resourceVersion.
            return written(t, StatusCode::OK, &prepared.version, read_at).map(|r| warn(r, &warnings));
        }
        match prepared.commit(state, &key, read_at).await {
            Ok((revision, version)) => {
                claims.settle(state).await;
                return written(t, StatusCode::OK, &version, revision).map(|r| warn(r, &warnings));
            }
            Err(SourceError::Conflict { .. }) => {
                claims.release(state).await;
                continue;
            }
            // Whether it was stored is not known: its claims stay, for the repair loop.
            Err(e) => return Err(errors::source(&e, resource, name)),
        }
    }
    Err(Status::conflict(resource, name))
}

/// How many times a write reads, changes and writes again after losing a race to another
/// write, before it answers 409. The apiserver retries without a bound; one keeps a write
/// that keeps losing from running forever.
const ATTEMPTS: usize = 32;

/// PATCH: JSON, merge and strategic patches are applied to the stored object and written
/// back on the condition that it has not changed since it was read; a concurrent write makes
/// the patch start again from the newer object, as the apiserver's patcher does. A
/// `metadata.resourceVersion` the patch sets is a precondition instead: a mismatch is 409.
pub(crate) async fn patch(
    state: &AppState,
    t: &Target,
    name: &str,
    p: &WriteParams,
    ty: PatchType,
    body: &[u8],
) -> Result<Response, Status> {
    if ty == PatchType::Apply {
        return apply(state, t, name, p, body).await;
    }
    if ty == PatchType::Strategic && !t.resource.spec.serves_strategic_merge() {
        return Err(errors::no_strategic_merge());
    }
    if p.force {
        return Err(Status::invalid(
            "force: Forbidden: may not be specified for non-apply patch",
        ));
    }
    let resource = &t.resource.info.resource;
    let key = t.storage_key(name);
    let patch = Patch::parse(ty, body)?;
    for _ in 0..ATTEMPTS {
        let (stored, revision) = state
            .store
            .get(&key)
            .await
            .map_err(|e| errors::source(&e, resource, name))?
            .ok_or_else(|| Status::not_found(resource, name))?;
        let mut current = parse_stored(t, name, &stored)?;
        // The patch sees the object as a GET shows it, resourceVersion included.
        metadata_mut(&mut current)?.insert("resourceVersion".into(), Value::String(revision.to_string()));
        let patched = patch.apply_to(t.resource.spec.list_rules(), current.clone())?;
        let mut object = object_from_value(&addressed(t), Value::Object(patched), Some(name))?;
        let warnings = check_fields(state, t, p, &mut object)?;
        let attempt = Attempt {
            key: &key,
            name,
            read_at: revision,
            warnings: &warnings,
            patched: true,
        };
        let ownership = Ownership::Update(&p.manager);
        if let Some(response) = attempt.store(state, t, p, object, &current, ownership).await? {
            return Ok(response);
        }
    }
    Err(Status::conflict(resource, name))
}

/// Server-side apply: creates the object if it does not exist (201), else merges the
/// configuration into it with field ownership ([`apply`](watchcache_api::mutation::apply)), retried like any
/// PATCH when another write comes between the read and the write.
/// An apply that finds no object creates it. The request was authorized as a `patch`; as the
/// apiserver does, the creation must be allowed too, or a user allowed only to patch could
/// create anything (dry runs included). A write without a requester is checked as anonymous.
fn authorize_create_by_apply(
    state: &AppState,
    t: &Target,
    p: &WriteParams,
    name: &str,
) -> Result<(), Status> {
    if state.authz.allows_everything() {
        return Ok(());
    }
    let user = p
        .requester
        .clone()
        .unwrap_or_else(|| std::sync::Arc::new(auth::UserInfo::anonymous()));
    let info = &t.resource.info;
    let (api_group, api_version) = match info.api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", info.api_version.as_str()),
    };
    let mut a = auth::Attributes::non_resource(user, "create", "");
    a.resource_request = true;
    a.api_group = api_group.to_owned();
    a.api_version = api_version.to_owned();
    a.resource = info.resource.clone();
    a.subresource = t.subresource.map_or("", Subresource::name).to_owned();
    a.namespace = t.namespace.clone().unwrap_or_default();
    a.name = name.to_owned();
    match state.authz.authorize(&a) {
        auth::Decision::Allow(_) => Ok(()),
        auth::Decision::Deny(reason) => Err(errors::forbidden(&a, &reason)),
    }
}

async fn apply(
    state: &AppState,
    t: &Target,
    name: &str,
    p: &WriteParams,
    body: &[u8],
) -> Result<Response, Status> {
    if p.field_manager.is_none() {
        return Err(Status::invalid(
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    }
    let config = apply::parse(body)?;
    let rules = t.resource.spec.list_rules();
    let api_version = &t.resource.info.api_version;
    let resource = &t.resource.info.resource;
    let key = t.storage_key(name);
    // The configuration must name this object; kind and apiVersion default to the resource's.
    let mut config = object_from_value(&addressed(t), Value::Object(config), Some(name))?;
    if t.resource.spec.subresources.status && t.subresource.is_none() {
        // Status is reset on the object itself: an apply there neither sets nor owns it.
        config.remove("status");
    }
    let warnings = check_fields(state, t, p, &mut config)?;
    for _ in 0..ATTEMPTS {
        let stored = state
            .store
            .get(&key)
            .await
            .map_err(|e| errors::source(&e, resource, name))?;
        let Some((stored, revision)) = stored else {
            authorize_create_by_apply(state, t, p, name)?;
            let mut object = apply::apply(rules, api_version, None, &config, &p.manager, p.force, &now())?;
            on_write(t, &mut object);
            let managers = fields::managers(&object);
            set_defaults(t, &mut object)?;
            initial_status(t, &mut object);
            prepare_create(t, &mut object, &managers)?;
            validate(t, &object, None, false)?;
            confirm_no_escalation(state, t, p, &object, None)?;
            let claims = services::allocate(state, t, &mut object, None).await?;
            let created = async {
                let (raw, version) = encode(t, &object)?;
                let admitted = namespaces::check_creatable(state, t, name).await?;
                if p.dry_run {
                    return Ok(Some(warn(json_response(StatusCode::CREATED, raw), &warnings)));
                }
                match state.leases.create(&key, raw, t.resource.ttl).await {
                    Ok(revision) => {
                        namespaces::confirm_created(state, t, name, &admitted, revision).await?;
                        written(t, StatusCode::CREATED, &version, revision).map(|r| Some(warn(r, &warnings)))
                    }
                    Err(SourceError::AlreadyExists(_)) => Ok(None),
                    Err(e) => Err(errors::source(&e, resource, name)),
                }
            }
            .await;
            let failed = match &created {
                Ok(Some(_)) => None,
                // Created meanwhile by another write: nothing stored here.
                Ok(None) => Some(409),
                Err(e) => Some(e.code),
            };
            claims.after(state, failed, p.dry_run).await;
            match created {
                Ok(Some(response)) => return Ok(response),
                // Created meanwhile: applied to as it is now.
                Ok(None) => continue,
                Err(e) => return Err(e),
            }
        };
        let current = parse_stored(t, name, &stored)?;
        let object = apply::apply(
            rules,
            api_version,
            Some(&current),
            &config,
            &p.manager,
            p.force,
            &now(),
        )?;
        let attempt = Attempt {
            key: &key,
            name,
            read_at: revision,
            warnings: &warnings,
            patched: false,
        };
        if let Some(response) = attempt
            .store(state, t, p, object, &current, Ownership::Recorded)
            .await?
        {
            return Ok(response);
        }
    }
    Err(Status::conflict(resource, name))
}

/// One read-modify-write attempt of a PATCH or an apply.
struct Attempt<'a> {
    key: &'a str,
    name: &'a str,
    /// The revision the object was read at: the write is conditional on it.
    read_at: Revision,
    warnings: &'a [String],
    /// A JSON, merge or strategic patch made the object (not an apply's configuration).
    patched: bool,
}

impl Attempt<'_> {
    /// Stores `object`, the new state of `current` (or answers a dry run, at the stored
    /// object's resourceVersion): the response, or `None` when another write came first and
    /// the caller should read and try again. A `metadata.resourceVersion` the object sets (the
    /// patch set it; the one the patch was shown is the read's) is a precondition: a mismatch
    /// is 409, and so is a lost race once the next attempt reads the newer version.
    async fn store(
        &self,
        state: &AppState,
        t: &Target,
        p: &WriteParams,
        mut object: Map<String, Value>,
        current: &Map<String, Value>,
        ownership: Ownership<'_>,
    ) -> Result<Option<Response>, Status> {
        let precondition = take_resource_version(metadata_mut(&mut object)?)?;
        if precondition.is_some_and(|r| r != self.read_at) {
            return Err(Status::conflict(&t.resource.info.resource, self.name));
        }
        let claims = services::allocate(state, t, &mut object, Some(current)).await?;
        let prepared = match prepare_update(state, p, t, object, current, ownership, self.patched) {
            Ok(prepared) => prepared,
            Err(e) => {
                claims.release(state).await;
                return Err(e);
            }
        };
        if p.dry_run {
            claims.release(state).await;
            return written(t, StatusCode::OK, &prepared.version, self.read_at)
                .map(|r| Some(warn(r, self.warnings)));
        }
        match prepared.commit(state, self.key, self.read_at).await {
            Ok((revision, version)) => {
                claims.settle(state).await;
                written(t, StatusCode::OK, &version, revision).map(|r| Some(warn(r, self.warnings)))
            }
            Err(SourceError::Conflict { .. }) => {
                claims.release(state).await;
                Ok(None)
            }
            // Whether it was stored is not known: its claims stay, for the repair loop.
            Err(e) => Err(errors::source(&e, &t.resource.info.resource, self.name)),
        }
    }
}

/// Applies `fieldValidation` to a request's object: the fields its schema does not know are
/// dropped (as decoding into the built-in types drops them), named in warnings (`Warn`, the
/// default), or refuse the write with 400 (`Strict`, which kubectl sends).
fn check_fields(
    state: &AppState,
    t: &Target,
    p: &WriteParams,
    object: &mut Map<String, Value>,
) -> Result<Vec<String>, Status> {
    let info = &t.resource.info;
    let openapi = state.openapi.load();
    let mut unknown = openapi.prune_unknown(&info.api_version, &info.kind, object);
    if let Some(schema) = &t.resource.spec.strategy.schema {
        unknown.extend(schema.prune(object));
    }
    openapi
        .check_values(&info.api_version, &info.kind, object)
        .map_err(|e| errors::ill_typed(&e, &info.kind, &info.api_version))?;
    match p.field_validation {
        FieldValidation::Strict if !unknown.is_empty() => {
            let fields: Vec<String> = unknown.iter().map(|f| format!("unknown field {f:?}")).collect();
            Err(Status::bad_request(format!(
                "strict decoding error: {}",
                fields.join(", ")
            )))
        }
        FieldValidation::Warn => Ok(unknown
            .into_iter()
            .map(|f| format!("unknown field {f:?}"))
            .collect()),
        _ => Ok(Vec::new()),
    }
}

/// Adds a `Warning: 299 - "…"` header per warning, as the apiserver sends them.
fn warn(mut response: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = format!("299 - {:?}", w);
        if let Ok(v) = HeaderValue::from_str(&text) {
            response.headers_mut().append(axum::http::header::WARNING, v);
        }
    }
    response
}

/// The stored value of `name` as a JSON object (JSON, or the protobuf kube-apiserver stores),
/// defaulted as the apiserver defaults what it decodes: one stored before a default was added
/// (by an older server) compares with a write as if it had it, so the default is no change (a
/// pod's immutable spec, its generation, who owns what). One that does not decode is a
/// corrupt object, and the write fails naming it (500), as the apiserver's does.
fn parse_stored(t: &Target, name: &str, raw: &[u8]) -> Result<Map<String, Value>, Status> {
    let corrupt = |why: &str| errors::corrupt_object(&t.storage_key(name), why);
    let mut object = t
        .resource
        .codec
        .stored_object(raw)
        .map_err(|e| corrupt(&e.to_string()))?;
    // A value that is another object (its name or namespace not its key's) is corrupt too, as
    // the caches hold it: a write must not act on, nor answer with, that other object.
    let meta = object.get("metadata");
    let field = |f: &str| meta.and_then(|m| m.get(f)).and_then(Value::as_str).unwrap_or("");
    let namespace = t.namespace.as_deref().unwrap_or("");
    if field("name") != name || field("namespace") != namespace {
        let (found_ns, found) = (field("namespace"), field("name"));
        return Err(corrupt(&format!(
            "the value is the object {found_ns}/{found}, not {namespace}/{name}"
        )));
    }
    for (path, value) in &t.resource.spec.strategy.defaults {
        set_if_unset(&mut object, path, value);
    }
    if let Some(default) = t.resource.spec.strategy.default {
        default(&mut object);
    }
    Ok(object)
}

/// Removes `metadata.resourceVersion` from a request's object: the revision the client
/// expects, if it names one ("" and "0" name none).
fn take_resource_version(meta: &mut Map<String, Value>) -> Result<Option<Revision>, Status> {
    match meta.remove("resourceVersion") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        // "0" is no version at all: the apiserver treats it as unset.
        Some(Value::String(s)) => Revision::parse(&s)
            .map(|r| (r != Revision::ZERO).then_some(r))
            .map_err(|e| Status::bad_request(format!("metadata.resourceVersion: {e}"))),
        Some(other) => Err(Status::bad_request(format!(
            "metadata.resourceVersion {other} is not a string"
        ))),
    }
}

/// Who an update's changed fields go to.
enum Ownership<'a> {
    /// An update by this manager: it owns what it changed.
    Update(&'a str),
    /// The object's `managedFields` already say (server-side apply).
    Recorded,
}

/// Converts a written object as the apiserver decodes it, by its kind's declaration
/// ([`Strategy::on_write`](watchcache_api::Strategy::on_write)): before it is defaulted,
/// validated, owned or stored.
fn on_write(t: &Target, object: &mut Map<String, Value>) {
    if let Some(convert) = t.resource.spec.strategy.on_write {
        convert(object);
    }
}

/// The object an update stores: the client's `object`, with the fields the server owns taken
/// from the stored `current` and `managedFields` brought up to date; serialised and checked by
/// the codec ([`encode`]).
fn prepare_update(
    state: &AppState,
    p: &WriteParams,
    t: &Target,
    mut object: Map<String, Value>,
    current: &Map<String, Value>,
    ownership: Ownership<'_>,
    patched: bool,
) -> Result<Prepared, Status> {
    on_write(t, &mut object);
    // An update is defaulted as a create is: an object replaced without `spec.replicas` is
    // stored with its default, as the apiserver stores it.
    set_defaults(t, &mut object)?;
    let mut object = match (t.subresource, t.resource.spec.subresources.status) {
        // Through /status only the status changes (and labels and annotations, as the
        // apiserver lets status writers change them).
        (Some(Subresource::Status), _) => {
            let mut out = current.clone();
            match object.remove("status") {
                Some(status) => out.insert("status".into(), status),
                None => out.remove("status"),
            };
            let request_meta = object.get("metadata").and_then(Value::as_object);
            let meta = metadata_mut(&mut out)?;
            for field in ["labels", "annotations"] {
                match request_meta.and_then(|m| m.get(field)) {
                    Some(v) => meta.insert(field.into(), v.clone()),
                    None => meta.remove(field),
                };
            }
            out
        }
        // Through /ephemeralcontainers, a pod's ephemeral containers alone.
        (Some(Subresource::EphemeralContainers), _) => {
            let mut out = current.clone();
            let wanted = object
                .get("spec")
                .and_then(|s| s.get("ephemeralContainers"))
                .cloned();
            if let Some(Value::Object(spec)) = out.get_mut("spec") {
                match wanted {
                    Some(list) => spec.insert("ephemeralContainers".into(), list),
                    None => spec.remove("ephemeralContainers"),
                };
            }
            out
        }
        // Through /finalize, a namespace's object but its status, spec.finalizers included.
        (Some(Subresource::Finalize), _) => {
            keep(&mut object, current, "status");
            object
        }
        // The object itself (a Scale's write is one, made by `scale.rs`): its status, and the
        // fields its kind resets, are left as they are.
        (None | Some(Subresource::Scale | Subresource::Eviction), status) => {
            if status {
                keep(&mut object, current, "status");
            }
            for path in &t.resource.spec.strategy.reset_on_update {
                keep(&mut object, current, path);
            }
            object
        }
    };
    let subresource = t.subresource.map_or("", Subresource::name);
    let managers = match ownership {
        Ownership::Update(manager) => {
            // What a client sends in managedFields is not taken: ownership follows the change.
            let mut managers = fields::managers(current);
            fields::record_update(
                t.resource.spec.list_rules(),
                &mut managers,
                &Writer {
                    manager,
                    subresource,
                    api_version: &t.resource.info.api_version,
                    time: &now(),
                },
                current,
                &object,
            );
            Some(managers)
        }
        Ownership::Recorded => None,
    };
    let current_meta = current.get("metadata").and_then(Value::as_object);
    let meta = metadata_mut(&mut object)?;
    for field in SERVER_OWNED {
        if *field == "managedFields" && managers.is_none() {
            continue; // apply computed them
        }
        meta.remove(*field);
        if let Some(v) = current_meta.and_then(|m| m.get(*field)) {
            meta.insert((*field).into(), v.clone());
        }
    }
    meta.remove("resourceVersion");
    // generation moves when the spec does, for the kinds that keep one.
    if t.resource.spec.strategy.generation && object.get("spec") != current.get("spec") {
        bump_generation(&mut object)?;
    }
    if let Some(managers) = managers {
        fields::set_managers(&mut object, &managers, &t.resource.info.api_version);
    }
    validate(t, &object, Some(current), patched)?;
    confirm_no_escalation(state, t, p, &object, Some(current))?;
    // An object being deleted goes when its last finalizer does (unless a grace period is
    // still running: then it waits for the delete that ends it).
    let finalized = deletion::finished(&object);
    // An update that changes nothing is not written (no new resourceVersion, no event).
    let mut before = current.clone();
    if let Some(Value::Object(meta)) = before.get_mut("metadata") {
        meta.remove("resourceVersion");
    }
    let unchanged = !finalized && before == object;
    let (raw, version) = encode(t, &object)?;
    Ok(Prepared {
        raw,
        version,
        finalized,
        unchanged,
        ttl: t.resource.ttl,
    })
}

/// An update ready to store.
struct Prepared {
    raw: Bytes,
    version: ObjectVersion,
    /// The object is being deleted and has no finalizer left: the update deletes it.
    finalized: bool,
    /// The update changes nothing: it is answered without a write.
    unchanged: bool,
    /// The object's time to live, counted again from this write (Events).
    ttl: Option<std::time::Duration>,
}

impl Prepared {
    /// Stores the update, or, for an object whose last finalizer it removed, deletes it; on
    /// the condition that the stored object is still the one read at `read_at`. An update
    /// that changes nothing writes nothing.
    async fn commit(
        self,
        state: &AppState,
        key: &str,
        read_at: Revision,
    ) -> Result<(Revision, ObjectVersion), SourceError> {
        if self.unchanged {
            return Ok((read_at, self.version));
        }
        let revision = if self.finalized {
            state.store.delete(key, Some(read_at)).await?.0
        } else {
            state
                .leases
                .update(key, self.raw, Some(read_at), self.ttl)
                .await?
        };
        Ok((revision, self.version))
    }
}

fn bump_generation(object: &mut Map<String, Value>) -> Result<(), Status> {
    let meta = metadata_mut(object)?;
    let generation = meta.get("generation").and_then(Value::as_i64).unwrap_or(0);
    meta.insert("generation".into(), Value::from(generation + 1));
    Ok(())
}

/// DELETE: the object goes at once, is marked for its finalizers or its grace period, or is
/// answered as it is, as [`deletion::plan`] decides; each on the condition that the object is
/// still the one read, so a concurrent update makes it look again.
pub(crate) async fn delete(
    state: &AppState,
    t: &Target,
    name: &str,
    p: &DeleteParams,
) -> Result<Response, Status> {
    let resource = &t.resource.info.resource;
    let key = t.storage_key(name);
    for _ in 0..ATTEMPTS {
        let (current, revision) = state
            .store
            .get(&key)
            .await
            .map_err(|e| errors::source(&e, resource, name))?
            .ok_or_else(|| Status::not_found(resource, name))?;
        let parsed = parse_stored(t, name, &current);
        if p.ignore_store_read_error {
            return unsafe_delete(state, t, name, p, parsed.is_err(), revision).await;
        }
        let mut object = parsed?;
        check_preconditions(t, name, p, &object, revision)?;
        // A kind whose deletion its controller finishes (a CRD, whose objects go first) is
        // marked under its finalizer.
        if let Some(finalizer) = &t.resource.spec.strategy.deletion_finalizer {
            add_deletion_finalizer(&mut object, finalizer);
        }
        let mark = match deletion::plan(
            t.resource.spec.strategy.deletion,
            &object,
            p.grace_period_seconds,
            SystemTime::now(),
        ) {
            Deletion::AsIs => return answer_with(t, &current, revision),
            Deletion::Now if p.write.dry_run => return answer_with(t, &current, revision),
            Deletion::Now => match state.store.delete(&key, Some(revision)).await {
                // The last state, stamped with the deletion's revision as the apiserver's
                // store does: a client that reads at it sees the object gone.
                Ok((deleted, prev)) => {
                    services::release_deleted(state, t, &prev).await;
                    return answer_with(t, &prev, deleted);
                }
                Err(SourceError::Conflict { .. }) => continue,
                Err(e) => return Err(errors::source(&e, resource, name)),
            },
            Deletion::Mark(mark) => mark,
        };
        // A stored object without metadata is a fault to report, not one to mark blindly.
        metadata_mut(&mut object)?;
        mark.apply(&mut object);
        let (raw, version) = encode(t, &object)?;
        if p.write.dry_run {
            return written(t, StatusCode::OK, &version, revision);
        }
        match state.store.update(&key, raw, Some(revision)).await {
            Ok(revision) => return written(t, StatusCode::OK, &version, revision),
            Err(SourceError::Conflict { .. }) => continue,
            Err(e) => return Err(errors::source(&e, resource, name)),
        }
    }
    Err(Status::conflict(resource, name))
}

/// DeleteCollection: deletes every object of the collection that the request's selectors
/// match (finalizers holding some as for a DELETE of each), and answers with the list of the
/// objects as they were deleted (or marked).
pub(crate) async fn delete_collection(
    state: &AppState,
    t: &Target,
    p: &Params,
    d: &DeleteParams,
) -> Result<Response, Status> {
    let mut opts = p.list_options(t.namespace.as_deref())?;
    opts.limit = None;
    opts.continue_token = None;
    let list = t
        .resource
        .cache
        .list(&opts)
        .await
        .map_err(|e| errors::cache(&e, &t.resource.info))?;
    let mut items = Vec::with_capacity(list.items.len());
    for object in list.items {
        let target = Target {
            resource: t.resource.clone(),
            namespace: t
                .resource
                .spec
                .namespaced
                .then(|| object.key().namespace().to_owned()),
            name: None,
            subresource: None,
        };
        match delete(state, &target, object.key().name(), d).await {
            Ok(response) => {
                let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                    .await
                    .map_err(|e| Status::internal(e.to_string()))?;
                items.push(
                    serde_json::from_slice::<Value>(&body).map_err(|e| Status::internal(e.to_string()))?,
                );
            }
            Err(s) if s.code == 404 => {} // gone meanwhile
            Err(s) => return Err(s),
        }
    }
    let info = &t.resource.info;
    let body = serde_json::json!({
        "kind": info.list_kind,
        "apiVersion": info.api_version,
        "metadata": {},
        "items": items,
    });
    Ok(json_response(StatusCode::OK, body.to_string()))
}

/// The stored `value` of the target at `revision`, decoded once, as the response.
fn answer_with(t: &Target, value: &[u8], revision: Revision) -> Result<Response, Status> {
    let version = t
        .resource
        .codec
        .decode(value, revision)
        .map_err(|e| errors::codec(&e))?;
    written(t, StatusCode::OK, &version, revision)
}

/// A DELETE with `ignoreStoreReadErrorWithClusterBreakingPotential` (KEP-3926): a corrupt
/// object (its stored value does not decode, so no finalizer, precondition or grace period
/// can be read) is deleted as it is stored, at the revision read. The option is refused (422)
/// for an object that decodes: it is only for corrupt ones.
async fn unsafe_delete(
    state: &AppState,
    t: &Target,
    name: &str,
    p: &DeleteParams,
    corrupt: bool,
    revision: Revision,
) -> Result<Response, Status> {
    let resource = &t.resource.info.resource;
    if !corrupt {
        let field = "ignoreStoreReadErrorWithClusterBreakingPotential";
        let why = "Invalid value: true: is exclusively used to delete corrupt object(s), try again by removing this option";
        let mut s = Status::invalid(format!("{resource} {name:?} is invalid: {field}: {why}"));
        s.details = Some(serde_json::json!({
            "name": name,
            "kind": resource,
            "causes": [{"reason": "FieldValueInvalid", "message": why, "field": field}],
        }));
        return Err(s);
    }
    if !p.write.dry_run {
        match state.store.delete(&t.storage_key(name), Some(revision)).await {
            Ok(_) | Err(SourceError::NotFound(_)) => {}
            Err(e) => return Err(errors::source(&e, resource, name)),
        }
    }
    // As the apiserver answers a deletion that returns no object: its name and kind, and 200.
    let details = serde_json::json!({"name": name, "kind": t.resource.info.kind});
    Ok(crate::handlers::response::json_response(
        StatusCode::OK,
        Status::success_body(Some(200), Some(&details)),
    ))
}

/// A DELETE's preconditions against the object as stored: a mismatch is 409, as the
/// apiserver answers it.
fn check_preconditions(
    t: &Target,
    name: &str,
    p: &DeleteParams,
    current: &Map<String, Value>,
    revision: Revision,
) -> Result<(), Status> {
    let failed = |what: &str, wanted: &str, found: &str| {
        let mut s = Status::conflict(&t.resource.info.resource, name);
        s.message =
            format!("Precondition failed: {what} in precondition: {wanted}, {what} in object meta: {found}");
        Err(s)
    };
    if let Some(wanted) = p.precondition_revision.filter(|&r| r != revision) {
        return failed("ResourceVersion", &wanted.to_string(), &revision.to_string());
    }
    if let Some(wanted) = &p.precondition_uid {
        let found = current
            .get("metadata")
            .and_then(|m| m.get("uid"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        if found != wanted {
            return failed("UID", wanted, found);
        }
    }
    Ok(())
}

/// Validates `object` as it will be stored (the update of `current`, if any) as the
/// apiserver validates its kind; a refusal is the Status the apiserver answers (`patched`: a
/// JSON, merge or strategic patch made it).
fn validate(
    t: &Target,
    object: &Map<String, Value>,
    current: Option<&Map<String, Value>>,
    patched: bool,
) -> Result<(), Status> {
    let checks = t.resource.spec.strategy.checks;
    let checked = match (current, t.subresource) {
        (None, _) => validation::on_create(checks, object),
        (Some(current), Some(Subresource::EphemeralContainers)) => {
            validation::on_ephemeral_containers_update(object, current)
        }
        (Some(current), _) => validation::on_update(checks, object, current),
    };
    // A custom resource's schema and rules, after the metadata's checks.
    let checked = match &t.resource.spec.strategy.schema {
        Some(schema) => schema.refuse(checked, object, current),
        None => checked,
    };
    checked.map_err(|refusal| {
        let name = object
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        errors::refused(&t.resource.info, name, refusal, patched.then_some(object))
    })
}

/// Refuses a user's write of an RBAC kind that grants what they do not hold, as the
/// apiserver's RBAC storage does ([`auth::confirm_no_escalation`]): 403, after validation
/// (the apiserver checks first, so it answers an invalid object of an unprivileged writer
/// 403 where this answers 422). An update that changes only what the garbage collector
/// changes (owner references, finalizers) is not checked, as the apiserver does not check
/// it: a writer who lost rights can still let the object go.
fn confirm_no_escalation(
    state: &AppState,
    t: &Target,
    p: &WriteParams,
    object: &Map<String, Value>,
    current: Option<&Map<String, Value>>,
) -> Result<(), Status> {
    let Some(user) = &p.requester else {
        return Ok(());
    };
    let info = &t.resource.info;
    // The RBAC kinds, not a custom resource of the same kind name in another group.
    if t.resource.spec.group != "rbac.authorization.k8s.io"
        || !matches!(
            info.kind.as_str(),
            "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding"
        )
        || current.is_some_and(|c| only_gc_fields_differ(object, c))
    {
        return Ok(());
    }
    let write = auth::RbacWrite {
        kind: &info.kind,
        namespace: t.namespace.as_deref().unwrap_or_default(),
        request_name: t.name.as_deref().unwrap_or_default(),
        object,
        current,
    };
    auth::confirm_no_escalation(&state.authz, user, &write).map_err(|why| {
        let name = object
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        errors::forbidden_write(info, name, &why)
    })
}

/// Whether `object` and `current` differ at most in what the garbage collector changes
/// (owner references, finalizers) and what the server keeps (resourceVersion,
/// managedFields).
fn only_gc_fields_differ(object: &Map<String, Value>, current: &Map<String, Value>) -> bool {
    let strip = |o: &Map<String, Value>| {
        let mut o = o.clone();
        if let Some(Value::Object(meta)) = o.get_mut("metadata") {
            for field in [
                "ownerReferences",
                "finalizers",
                "resourceVersion",
                "managedFields",
            ] {
                meta.remove(field);
            }
        }
        o
    };
    strip(object) == strip(current)
}

/// Serialises `object` as it will be stored, and decodes it once with the resource's codec:
/// the check that the cache will accept it, and the version the response is written from.
fn encode(t: &Target, object: &Map<String, Value>) -> Result<(Bytes, ObjectVersion), Status> {
    // A custom resource written in a version other than its storage version is stored in
    // that one (`None` conversion: only `apiVersion` differs); its codec serves it back as
    // the version it was written in.
    let spec = &t.resource.spec;
    let raw = match &spec.stored_as {
        Some(stored_as) => {
            let mut stored = object.clone();
            // A kind stored as another kind is converted into it (an events.k8s.io/v1 Event
            // into a core Event).
            if let Some(conversion) = spec.conversion {
                (conversion.to_storage)(&mut stored);
            }
            stored.insert("apiVersion".into(), Value::String(stored_as.clone()));
            serde_json::to_vec(&stored)
        }
        None => serde_json::to_vec(object),
    };
    let raw = Bytes::from(raw.map_err(|e| Status::internal(e.to_string()))?);
    let info = &t.resource.info;
    // The stored form of a converted kind is another kind's, checked as that kind (the codec's
    // decode below checks the served form against this kind's schema).
    let stored_message = match spec.conversion {
        Some(conversion) => conversion.stored_protobuf,
        None => info.protobuf,
    };
    stored::admit(stored_message, &raw).map_err(|e| errors::not_stored(&e, &info.kind, &info.api_version))?;
    // Revision 0 until the store assigns one; `written` stamps the real one.
    let version = t
        .resource
        .codec
        .decode(&raw, Revision::ZERO)
        .map_err(|e| errors::invalid_object(&e))?;
    Ok((raw, version))
}

/// The response to a write: `version`'s JSON, stamped with the write's `revision`.
fn written(
    t: &Target,
    code: StatusCode,
    version: &ObjectVersion,
    revision: Revision,
) -> Result<Response, Status> {
    let mut body = BytesMut::new();
    t.resource
        .frames
        .write_object(version, revision, &mut body)
        .map_err(|e| errors::codec(&e))?;
    Ok(json_response(code, body.freeze()))
}

/// Adds `finalizer` to an object not yet being deleted.
fn add_deletion_finalizer(object: &mut Map<String, Value>, finalizer: &str) {
    let Some(Value::Object(meta)) = object.get_mut("metadata") else {
        return;
    };
    if meta.get("deletionTimestamp").is_some_and(|d| !d.is_null()) {
        return;
    }
    let list = meta
        .entry("finalizers")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(list) = list
        && !list.iter().any(|f| f == finalizer)
    {
        list.push(Value::String(finalizer.to_owned()));
    }
}

/// Gives `object` the field at dotted `path` as `current` has it (or, where `current` has none,
/// none): what an update may not change.
fn keep(object: &mut Map<String, Value>, current: &Map<String, Value>, path: &str) {
    let mut parents: Vec<&str> = path.split('.').collect();
    let Some(field) = parents.pop() else { return };
    let stored = parents
        .iter()
        .try_fold(current, |m, p| m.get(*p)?.as_object())
        .and_then(|m| m.get(field))
        .cloned();
    let mut at = object;
    for part in parents {
        if stored.is_none() && !at.get(part).is_some_and(Value::is_object) {
            return; // nothing there to remove, nothing to put there
        }
        match at.entry(part).or_insert_with(|| Value::Object(Map::new())) {
            Value::Object(next) => at = next,
            // Not an object where the stored one has one: the codec judges it.
            _ => return,
        }
    }
    match stored {
        Some(v) => at.insert(field.to_owned(), v),
        None => at.remove(field),
    };
}

/// Sets the field at dotted `path` to `value` unless the object sets it; creates the objects
/// on the way. A non-object on the way leaves the object as it is (its codec judges it).
fn set_if_unset(object: &mut Map<String, Value>, path: &str, value: &Value) {
    let mut parts = path.split('.').peekable();
    let mut at = object;
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            at.entry(part).or_insert_with(|| value.clone());
            return;
        }
        match at.entry(part).or_insert_with(|| Value::Object(Map::new())) {
            Value::Object(next) => at = next,
            _ => return,
        }
    }
}

fn metadata_mut(object: &mut Map<String, Value>) -> Result<&mut Map<String, Value>, Status> {
    object
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| Status::internal("no metadata"))
}

/// What the checks of a request body need to know of the resource a request addresses.
pub(crate) struct Addressed<'a> {
    pub(crate) info: &'a ResourceInfo,
    pub(crate) namespaced: bool,
    pub(crate) names: NameRule,
    /// The namespace on the request's path.
    pub(crate) namespace: Option<&'a str>,
}

fn addressed(t: &Target) -> Addressed<'_> {
    Addressed {
        info: &t.resource.info,
        namespaced: t.resource.spec.namespaced,
        names: t.resource.spec.names,
        namespace: t.namespace.as_deref(),
    }
}

/// Parses a request body into a JSON object of this resource at the target's namespace, named
/// by the body, the path or `generateName`.
pub(crate) fn object_from_body(
    r: &Addressed<'_>,
    body: &[u8],
    name_from_path: Option<&str>,
) -> Result<Map<String, Value>, Status> {
    object_from_value(r, parse_body(body)?, name_from_path)
}

/// A request body as JSON.
fn parse_body(body: &[u8]) -> Result<Value, Status> {
    serde_json::from_slice(body).map_err(|e| Status::bad_request(format!("invalid JSON body: {e}")))
}

/// [`object_from_body`] for a body already parsed (or made by a patch).
pub(crate) fn object_from_value(
    r: &Addressed<'_>,
    value: Value,
    name_from_path: Option<&str>,
) -> Result<Map<String, Value>, Status> {
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
    match (meta.get("namespace"), r.namespace) {
        (Some(Value::String(ns)), Some(path_ns)) if ns != path_ns => {
            return Err(Status::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        (_, Some(path_ns)) => {
            meta.insert("namespace".into(), Value::String(path_ns.to_owned()));
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
        (_, Some(Value::String(prefix)), None) if !prefix.is_empty() => generate_name::generate(prefix),
        _ => {
            return Err(Status::invalid(
                "metadata.name: Required value: name or generateName is required",
            ));
        }
    };
    check_names(r, &name)?;
    meta.insert("name".into(), Value::String(name));
    Ok(object)
}

const SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
    characters, '-' or '.', and must start and end with an alphanumeric character";
const LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric \
    characters or '-', and must start and end with an alphanumeric character (at most 63)";

/// Validates the object's name (by its kind's [`NameRule`]) and namespace
/// (a label) as the apiserver does: 422 with a cause per field, before anything is stored.
fn check_names(r: &Addressed<'_>, name: &str) -> Result<(), Status> {
    let refused = match r.names {
        NameRule::Label => (!is_dns1123_label(name)).then(|| LABEL.to_owned()),
        NameRule::Subdomain => (!is_dns1123_subdomain(name)).then(|| SUBDOMAIN.to_owned()),
        NameRule::PathSegment => validation::path_segment(name).into_iter().next(),
    };
    let mut errors = Vec::new();
    if let Some(why) = &refused {
        errors.push(("metadata.name", name, why.as_str()));
    }
    if let Some(ns) = r.namespace.filter(|ns| !is_dns1123_label(ns)) {
        errors.push(("metadata.namespace", ns, LABEL));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        // The kind named with its group, as the apiserver names it
        // (`ClusterRole.rbac.authorization.k8s.io "a%b" is invalid`).
        let kind = &r.info.kind;
        let group = r.info.api_version.split_once('/').map_or("", |(g, _)| g);
        let qualified = if group.is_empty() {
            kind.clone()
        } else {
            format!("{kind}.{group}")
        };
        let mut status = Status::invalid_fields(&qualified, name, &errors);
        if let Some(details) = status.details.as_mut() {
            details["kind"] = Value::String(kind.clone());
            if !group.is_empty() {
                details["group"] = Value::String(group.to_owned());
            }
        }
        Err(status)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A server on a free loopback port, on this test's runtime and thread.
    async fn server() -> crate::Server {
        let config = crate::ServeConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            ..crate::ServeConfig::default()
        };
        crate::Server::start(config).await.unwrap()
    }

    #[tokio::test]
    async fn a_generated_name_that_is_taken_is_drawn_again_then_given_up() {
        let server = server().await;
        let state = server.state();
        let t = Target::resolve(state, "v1", "configmaps", Some("default".into()), None).unwrap();
        let body = br#"{"metadata":{"generateName":"g-"}}"#;
        // The names a create draws, made predictable: the test's thread is the handler's.
        let draws = |n: usize| {
            fastrand::seed(7);
            (0..n).map(|_| generate_name::generate("g-")).collect::<Vec<_>>()
        };
        let take = |name: &str| {
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}});
            let key = t.storage_key(name);
            async move { state.store.create(&key, Bytes::from(cm.to_string())).await }
        };
        let names = draws(3);
        for name in &names[..2] {
            take(name).await.unwrap();
        }
        fastrand::seed(7);
        let response = create(state, &t, &WriteParams::default(), body).await.unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        let created: Value = serde_json::from_slice(
            &axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap(),
        )
        .unwrap();
        assert_eq!(created["metadata"]["name"], names[2], "the third draw");
        // When every draw is taken: 409, as the apiserver words it.
        let names = draws(generate_name::ATTEMPTS);
        for name in &names[3..] {
            take(name).await.unwrap();
        }
        fastrand::seed(7);
        let refused = create(state, &t, &WriteParams::default(), body)
            .await
            .unwrap_err();
        assert_eq!((refused.code, refused.reason), (409, "AlreadyExists"));
        assert_eq!(
            refused.message,
            format!(
                "configmaps \"{}\" already exists, the server was not able to generate a unique name for the object",
                names[generate_name::ATTEMPTS - 1]
            )
        );
        server.shutdown().await.unwrap();
    }

    #[test]
    fn kept_fields_are_the_stored_ones() {
        let current = json!({"spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
        let current = current.as_object().unwrap();
        let mut object = json!({"spec": {"finalizers": []}, "metadata": {}})
            .as_object()
            .unwrap()
            .clone();
        keep(&mut object, current, "spec.finalizers");
        keep(&mut object, current, "status");
        assert_eq!(
            Value::Object(object),
            json!({"spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}, "metadata": {}})
        );
        let mut none = json!({"status": {"x": 1}}).as_object().unwrap().clone();
        keep(&mut none, &Map::new(), "status");
        keep(&mut none, &Map::new(), "spec.finalizers");
        assert_eq!(Value::Object(none), json!({}), "no spec made up");
    }

    #[test]
    fn defaults_fill_only_what_is_unset() {
        let mut pod = json!({"metadata": {"name": "p"}}).as_object().unwrap().clone();
        set_if_unset(&mut pod, "status.phase", &Value::from("Pending"));
        assert_eq!(pod["status"]["phase"], "Pending");
        let mut running = json!({"status": {"phase": "Running"}})
            .as_object()
            .unwrap()
            .clone();
        set_if_unset(&mut running, "status.phase", &Value::from("Pending"));
        assert_eq!(running["status"]["phase"], "Running");
        let mut odd = json!({"status": 7}).as_object().unwrap().clone();
        set_if_unset(&mut odd, "status.phase", &Value::from("Pending"));
        assert_eq!(odd["status"], 7, "left for the codec to judge");
    }
}
