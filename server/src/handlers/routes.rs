//! Routing: which handler serves a method and path. Discovery, health and metrics are
//! answered here; resource requests are resolved to a [`Target`] and handed to the read path
//! ([`reads`](crate::handlers::reads)) or the write path ([`writes`](crate::handlers::writes)). A middleware
//! times every request, and logs and audits it ([`request_log`](crate::audit::request_log)); inside
//! it, another authenticates and authorizes every request before any handler runs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use watchcache_encoders::{ResourceInfo, Status, protobuf};

use crate::audit::request_log;
use crate::auth::{self, ClientCert, Decision, UserInfo};
use crate::handlers::app::AppState;
use crate::handlers::discovery;
use crate::handlers::errors;
use crate::handlers::media::{self, ReadFormat};
use crate::handlers::params::{DeleteParams, Params, WriteParams};
use crate::handlers::reads;
use crate::handlers::reads::Form;
use crate::handlers::reads::table::TableRequest;
use crate::handlers::response::{json_response, status_response};
use crate::handlers::target::{Subresource, Target};
use crate::handlers::writes;
use crate::handlers::writes::eviction;
use crate::handlers::writes::scale;
use crate::metrics;
use crate::transport::RequestBytesSpent;
use crate::transport::connection::{Connection, RequestDeadline};
use watchcache_api::mutation::patch::PatchType;
use watchcache_api::openapi;

type AppStateRef = State<Arc<AppState>>;

/// The largest request body accepted, as the apiserver's limit: 3 MiB.
const MAX_BODY_BYTES: usize = 3 << 20;

/// 413 `RequestEntityTooLarge`, as the apiserver answers a body over its limit.
fn too_large() -> Status {
    Status::new(
        413,
        "RequestEntityTooLarge",
        format!("the request body is larger than {MAX_BODY_BYTES} bytes"),
    )
}

/// A body the router could not read: too large is 413, as the apiserver answers it.
fn body_status(rejection: &BytesRejection) -> Status {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        too_large()
    } else {
        Status::bad_request(format!("cannot read the request body: {rejection}"))
    }
}

pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route(
            "/version",
            get(|| async { json_response(StatusCode::OK, discovery::version().to_string()) }),
        )
        .route("/api", get(api))
        .route("/apis", get(apis))
        .route("/api/v1", get(api_v1))
        .route("/openapi/v2", get(openapi_v2))
        .route(
            "/openapi/v3",
            get(|State(state): AppStateRef| async move {
                json_response(StatusCode::OK, state.openapi.load().v3_index())
            }),
        )
        .route("/openapi/v3/{*path}", get(openapi_v3))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            post(self_subject_access_review),
        )
        .route(
            "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
            post(self_subject_rules_review),
        )
        .route("/api/v1/{resource}", any(resource_request))
        .route("/api/v1/{resource}/{name}", any(resource_request))
        .route("/api/v1/namespaces/{ns}/{resource}", any(resource_request))
        .route("/api/v1/namespaces/{ns}/{resource}/{name}", any(resource_request))
        .route("/api/v1/{resource}/{name}/{subresource}", any(resource_request))
        .route(
            "/api/v1/namespaces/{ns}/{resource}/{name}/{subresource}",
            any(resource_request),
        )
        .route("/apis/{group}", get(api_group))
        .route("/apis/{group}/{version}", get(api_group_version))
        .route("/apis/{group}/{version}/{resource}", any(resource_request))
        .route("/apis/{group}/{version}/{resource}/{name}", any(resource_request))
        .route(
            "/apis/{group}/{version}/namespaces/{ns}/{resource}",
            any(resource_request),
        )
        .route(
            "/apis/{group}/{version}/namespaces/{ns}/{resource}/{name}",
            any(resource_request),
        )
        .route(
            "/apis/{group}/{version}/{resource}/{name}/{subresource}",
            any(resource_request),
        )
        .route(
            "/apis/{group}/{version}/namespaces/{ns}/{resource}/{name}/{subresource}",
            any(resource_request),
        )
        .fallback(|| async { status_response(&Status::not_found("", "")) })
        .method_not_allowed_fallback(|method: Method| async move {
            status_response(&Status::method_not_allowed(format!(
                "method {method} is not supported on this path"
            )))
        })
        // Bodies over the limit are refused while read; the handlers answer that with a Status.
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(state.clone(), read_body))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            authenticate_and_authorize,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), timing))
        .with_state(state)
}

/// An aggregated discovery answer when the Accept header asks for one first.
fn aggregated(state: &AppState, headers: &HeaderMap, core: bool) -> Option<Response> {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let version = discovery::aggregated_version(accept)?;
    let body = discovery::aggregated(state.resources.now().values().map(|r| &**r), core, version);
    let mut response = json_response(StatusCode::OK, body.to_string());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(discovery::aggregated_content_type(version)),
    );
    Some(response)
}

async fn api(State(state): AppStateRef, headers: HeaderMap) -> Response {
    aggregated(&state, &headers, true).unwrap_or_else(|| {
        json_response(
            StatusCode::OK,
            discovery::api(&state.addr.to_string()).to_string(),
        )
    })
}

async fn apis(State(state): AppStateRef, headers: HeaderMap) -> Response {
    aggregated(&state, &headers, false).unwrap_or_else(|| {
        json_response(
            StatusCode::OK,
            discovery::apis(state.resources.now().values().map(|r| &**r)).to_string(),
        )
    })
}

async fn api_v1(State(state): AppStateRef) -> Response {
    match discovery::resource_list(state.resources.now().values().map(|r| &**r), "v1") {
        Some(list) => json_response(StatusCode::OK, list.to_string()),
        None => status_response(&Status::not_found("", "")),
    }
}

async fn api_group(State(state): AppStateRef, Path(group): Path<String>) -> Response {
    match discovery::api_group(state.resources.now().values().map(|r| &**r), &group) {
        Some(g) => json_response(StatusCode::OK, g.to_string()),
        None => status_response(&Status::not_found("", "")),
    }
}

async fn api_group_version(
    State(state): AppStateRef,
    Path((group, version)): Path<(String, String)>,
) -> Response {
    let api_version = format!("{group}/{version}");
    match discovery::resource_list(state.resources.now().values().map(|r| &**r), &api_version) {
        Some(list) => json_response(StatusCode::OK, list.to_string()),
        None => status_response(&Status::not_found("", "")),
    }
}

/// The media type of `/openapi/v2` in protobuf. client-go asks for
/// `application/com.github.proto-openapi.spec.v2@v1.0+protobuf`, but Go's media-type parser
/// refuses the `@` in an answer's Content-Type, so the answer names it with a dot.
const OPENAPI_V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// `/openapi/v2`, in JSON or in protobuf (gnostic's message), whichever the Accept header
/// lists first; 406 when it lists neither.
async fn openapi_v2(State(state): AppStateRef, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    for range in media::ranges(accept) {
        if range.is_json() {
            return json_response(StatusCode::OK, state.openapi.load().v2());
        }
        if range
            .media
            .starts_with("application/com.github.proto-openapi.spec.v2")
        {
            let mut r = (StatusCode::OK, state.openapi.load().v2_protobuf()).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(OPENAPI_V2_PROTOBUF),
            );
            return r;
        }
    }
    status_response(&Status::new(
        406,
        "NotAcceptable",
        format!("/openapi/v2 is served as application/json or {OPENAPI_V2_PROTOBUF}"),
    ))
}

async fn openapi_v3(State(state): AppStateRef, Path(path): Path<String>) -> Response {
    match state.openapi.load().v3(&path) {
        Some(doc) => json_response(StatusCode::OK, doc),
        None => status_response(&Status::not_found("", "")),
    }
}

/// How long `/readyz` waits for the store to answer.
const READYZ_STORE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

async fn readyz(State(state): AppStateRef) -> Response {
    let served = state.resources.now();
    let not_ready: Vec<&str> = served
        .values()
        .filter(|r| !r.cache.is_ready())
        .map(|r| &*r.label)
        .collect();
    let mut problems = Vec::new();
    if !not_ready.is_empty() {
        problems.push(format!("caches not ready: {}", not_ready.join(", ")));
    }
    // Reads at rv=0 go on from the caches; consistent reads need a store with a leader.
    if !state.store.healthy(READYZ_STORE_TIMEOUT).await {
        problems.push(
            "the store does not answer consistent reads (etcd: no leader or no member reachable); \
             reads at resourceVersion=0 are still served"
                .to_owned(),
        );
    }
    if problems.is_empty() {
        (StatusCode::OK, "ok").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, problems.join("\n")).into_response()
    }
}

async fn metrics_text(State(state): AppStateRef) -> Response {
    let m = &state.metrics;
    let relaxed = std::sync::atomic::Ordering::Relaxed;
    let _scrape = m.scrape();
    let served = state.resources.now();
    // Summed per label: the versions of a CRD share one.
    let mut gauges = std::collections::BTreeMap::<&str, [u64; metrics::CACHE_GAUGES]>::new();
    m.publish_retired();
    for r in served.values() {
        let stats = r.cache.stats();
        // The cache's counts, kept by its reflector and watches and added here.
        if let Some(counts) = &r.counts {
            counts.publish();
        }
        let sums = gauges.entry(&r.label).or_default();
        for (sum, value) in sums.iter_mut().zip([
            r.cache.config().capacity as u64,
            r.cache.history_len() as u64,
            stats.history_bytes.load(relaxed),
            stats.pinned_snapshots.load(relaxed),
            stats.catch_up_bytes.load(relaxed),
        ]) {
            *sum += value;
        }
    }
    m.set_cache_gauges(&gauges);
    #[cfg(feature = "etcd")]
    if let crate::Backend::Etcd(e) = &state.store {
        let history = e.history_stats();
        metrics::advance_to(&m.etcd_history_watches, history.opened);
        metrics::advance_to(&m.etcd_history_pauses, history.paused);
        metrics::advance_to(&m.etcd_history_received_bytes, history.received);
        metrics::advance_to(&m.etcd_history_dropped_bytes, history.dropped);
        m.etcd_history_waiting_bytes.set(history.waiting as i64);
    }
    let mut response = state.metrics.render().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// The verb a request is timed under. A closed set: a client inventing methods (`X1`, `X2`,
/// …) must not add a metric series per method.
fn verb(method: &Method, query: &str) -> &'static str {
    match *method {
        Method::GET if query.contains("watch=true") || query.contains("watch=1") => "WATCH",
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// Times every request to its response's head, and logs and audits it at its body's end
/// ([`request_log`]).
async fn timing(State(state): AppStateRef, request: Request, next: Next) -> Response {
    let verb = verb(request.method(), request.uri().query().unwrap_or_default()).to_owned();
    let begun = request_log::Begun::new(state.audit.as_ref(), &request);
    let start = Instant::now();
    let response = next.run(request).await;
    state
        .metrics
        .request_duration
        .get_or_create(&vec![("verb", verb)])
        .observe(start.elapsed().as_secs_f64());
    match begun {
        Some(begun) => begun.end(state.audit.as_ref(), response),
        None => response,
    }
}

/// Authenticates and authorizes every request before its handler runs: 401 for credentials
/// that do not verify, 403 for what the authorizer does not allow (in the apiserver's words),
/// and otherwise the handler, with the user (`Arc<UserInfo>`) in the request's extensions for
/// the handlers (the self-checks) and in the response's for the layers around (request log,
/// audit).
///
/// A watch is authorized as it starts, as the apiserver authorizes it: events are delivered
/// for as long as it runs, whatever later changes to the policy say.
async fn authenticate_and_authorize(State(state): AppStateRef, mut request: Request, next: Next) -> Response {
    let cert = match request.extensions().get::<ConnectInfo<Connection>>() {
        Some(ConnectInfo(conn)) => client_cert(conn),
        None => ClientCert::None,
    };
    let user = match state.authn.authenticate(&cert, request.headers()) {
        Ok(user) => user,
        Err(e) => {
            tracing::debug!(error = %e, path = request.uri().path(), "unauthenticated request");
            return status_response(&errors::unauthorized());
        }
    };
    if !state.authz.allows_everything() {
        let uri = request.uri();
        let attributes =
            match auth::attributes(user.clone(), request.method().as_str(), uri.path(), uri.query()) {
                Ok(a) => a,
                // A path under an API prefix that names no resource (`/api/v1/watch`): nothing
                // is served there, whoever asks; the router would answer it 404 too.
                Err(e) => {
                    tracing::debug!(error = %e, "a path that names no resource");
                    return status_response(&Status::not_found("", ""));
                }
            };
        if let Decision::Deny(reason) = state.authz.authorize(&attributes) {
            let mut response = status_response(&errors::forbidden(&attributes, &reason));
            response.extensions_mut().insert(user);
            return response;
        }
    }
    request.extensions_mut().insert(user.clone());
    let mut response = next.run(request).await;
    // For the request log and the audit log, which wrap this layer.
    response.extensions_mut().insert(user);
    response
}

/// Whether a handler may read a request's body: writes, and DELETE (its `DeleteOptions`).
/// Every other method's handler answers without it.
fn has_body(method: &Method) -> bool {
    matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    )
}

/// Reads a request's body whole before its handler runs, within the request timeout
/// (`--request-timeout`) and [`MAX_BODY_BYTES`], once the request is authorized: a body still
/// coming at the deadline is dropped (its bytes freed, an HTTP/1 connection closed after the
/// answer) and the request answered 504 `Timeout`. A method whose handler reads no body
/// (GET, HEAD, …) has its body dropped unread: the client cannot make the server hold it.
/// A mutating request first takes a place among those in flight
/// (`--max-mutating-requests-inflight`), held until its answer is made, or is answered 429
/// without its body being read; one of `system:masters` goes on without a place, as the
/// apiserver lets its super-admins through.
async fn read_body(State(state): AppStateRef, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let mut _place = None;
    let body = if has_body(&parts.method) {
        match state.mutating.enter() {
            Ok(place) => _place = place,
            Err(_) if is_master(&parts) => {}
            Err(status) => return status_response(&status),
        }
        let limit = state.config.request_timeout;
        match tokio::time::timeout(limit, collect(body)).await {
            Ok(Ok(bytes)) => Body::from(bytes),
            Ok(Err(status)) => return status_response(&status),
            Err(_) => {
                tracing::debug!(
                    path = parts.uri.path(),
                    ?limit,
                    "a request body did not arrive in time"
                );
                return status_response(&errors::body_timeout(limit));
            }
        }
    } else {
        Body::empty()
    };
    next.run(Request::from_parts(parts, body)).await
}

/// Whether the request's user (as authentication found it) is in `system:masters`.
fn is_master(parts: &axum::http::request::Parts) -> bool {
    parts
        .extensions
        .get::<Arc<UserInfo>>()
        .is_some_and(|user| user.groups.iter().any(|g| g == auth::MASTERS))
}

/// A body, whole: 413 past [`MAX_BODY_BYTES`], 429 when its HTTP/2 connection holds too much
/// of other requests (`transport::RequestBytesSpent`), 400 when it cannot be read. Grown as
/// the bytes come, never reserved from what the client announces.
async fn collect(body: Body) -> Result<Bytes, Status> {
    use http_body::Body as _;
    let mut body = std::pin::pin!(body);
    let mut whole = bytes::BytesMut::new();
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame = frame.map_err(|e| {
            let e = e.into_inner();
            if e.downcast_ref::<RequestBytesSpent>().is_some() {
                Status::too_many_requests(e.to_string(), std::time::Duration::from_secs(1))
            } else {
                Status::bad_request(format!("cannot read the request body: {e}"))
            }
        })?;
        if let Ok(data) = frame.into_data() {
            if whole.len() + data.len() > MAX_BODY_BYTES {
                return Err(too_large());
            }
            whole.extend_from_slice(&data);
        }
    }
    Ok(whole.freeze())
}

/// What a connection's client certificate says. Here rather than in `auth`, which the
/// connection's module will import for [`ClientCert`]: the layout keeps no module cycle.
fn client_cert(conn: &Connection) -> ClientCert {
    conn.client_cert()
}

/// The requester, as [`authenticate_and_authorize`] found it.
fn requester(request_user: Option<axum::Extension<Arc<UserInfo>>>) -> Arc<UserInfo> {
    match request_user {
        Some(axum::Extension(user)) => user,
        // Every request passes the middleware; a handler called without it is anonymous.
        None => Arc::new(UserInfo::anonymous()),
    }
}

/// A review's body as JSON: JSON as it is, protobuf (what kubectl sends) read by `protobuf`
/// from its envelope; other media types 415.
fn review_body(
    headers: &HeaderMap,
    body: &Result<Bytes, BytesRejection>,
    protobuf: fn(&[u8]) -> Result<Vec<u8>, Status>,
) -> Result<Vec<u8>, Status> {
    let body = body.as_ref().map_err(body_status)?;
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let media = content_type
        .and_then(|c| c.split(';').next())
        .map(str::trim)
        .unwrap_or("");
    if media.is_empty() || media.eq_ignore_ascii_case("application/json") {
        Ok(body.to_vec())
    } else if media.eq_ignore_ascii_case(watchcache_encoders::protobuf::PROTOBUF) {
        let envelope = watchcache_encoders::protobuf::open_envelope(body)
            .map_err(|e| Status::bad_request(format!("invalid protobuf body: {e}")))?;
        protobuf(envelope.raw)
    } else {
        Err(Status::new(
            415,
            "UnsupportedMediaType",
            format!("the body of a review must be JSON or protobuf, not {media}"),
        ))
    }
}

/// `POST …/selfsubjectaccessreviews`: may the requester do this? (`kubectl auth can-i`)
async fn self_subject_access_review(
    State(state): AppStateRef,
    user: Option<axum::Extension<Arc<UserInfo>>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let answer = review_body(&headers, &body, auth::access_review_from_protobuf)
        .and_then(|b| auth::access_review(&state.authz, requester(user), &b));
    match answer {
        Ok(review) => json_response(StatusCode::CREATED, review.to_string()),
        Err(s) => status_response(&s),
    }
}

/// `POST …/selfsubjectrulesreviews`: what may the requester do in a namespace? (`kubectl auth
/// can-i --list`)
async fn self_subject_rules_review(
    State(state): AppStateRef,
    user: Option<axum::Extension<Arc<UserInfo>>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let answer = review_body(&headers, &body, auth::rules_review_from_protobuf)
        .and_then(|b| auth::rules_review(&state.authz, &requester(user), &b));
    match answer {
        Ok(review) => json_response(StatusCode::CREATED, review.to_string()),
        Err(s) => status_response(&s),
    }
}

/// Serves a request on a resource path (any of the four shapes the router gives it: the
/// resource, perhaps a namespace, perhaps a name): reads from the caches, writes to the source.
// Each argument is one of axum's extractors: the handler's signature is its parsing.
#[expect(clippy::too_many_arguments, reason = "one argument per axum extractor")]
async fn resource_request(
    State(state): AppStateRef,
    ConnectInfo(conn): ConnectInfo<Connection>,
    user: Option<axum::Extension<Arc<UserInfo>>>,
    method: Method,
    Path(mut parts): Path<HashMap<String, String>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let api_version = match (parts.remove("group"), parts.remove("version")) {
        (Some(group), Some(version)) => format!("{group}/{version}"),
        _ => "v1".to_owned(),
    };
    let mut resource = parts.remove("resource").unwrap_or_default();
    let (mut ns, mut name) = (parts.remove("ns"), parts.remove("name"));
    let mut subresource = parts.remove("subresource");
    // `/api/v1/namespaces/<name>/status` (and `/finalize`) has the shape of a namespaced
    // collection.
    if matches!(resource.as_str(), "status" | "finalize") && name.is_none() {
        (resource, name, subresource) = ("namespaces".into(), ns.take(), Some(resource));
    }
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return status_response(&body_status(&rejection)),
    };
    let user_agent = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok());
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let user = requester(user);
    let write_params = || {
        WriteParams::parse(query.as_deref())
            .map(|p| p.with_user_agent(user_agent).with_requester(user.clone()))
    };
    let target =
        Target::resolve(&state, &api_version, &resource, ns, name).and_then(|t| match &subresource {
            Some(sub) => t.with_subresource(sub),
            None => Ok(t),
        });
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let served = target.as_ref().ok().map(|t| t.resource.clone());
    let is_write = method != Method::GET;
    // DeleteOptions may come in protobuf, as client-go's typed clients send them.
    let delete_body = || match &body[..] {
        [] => Ok(std::borrow::Cow::Borrowed(&body[..])),
        b => media::json_body(content_type, b, Some(openapi::DELETE_OPTIONS)),
    };
    // Writes run off the runtime's workers (`offload`), each with what it needs moved in.
    let content_type = content_type.map(str::to_owned);
    let result = match target {
        Ok(t) if t.subresource.is_some_and(|s| !s.serves(&method)) => Err(Status::method_not_allowed(
            format!("method {method} is not supported on a subresource"),
        )),
        Ok(t) if t.subresource == Some(Subresource::Eviction) => {
            let name = t.name.clone().unwrap_or_default();
            match write_params() {
                Ok(p) => {
                    let (s, body) = (state.clone(), body.clone());
                    let write = move || async move {
                        let body =
                            media::json_body(content_type.as_deref(), &body, Some(eviction::EVICTION))?;
                        eviction::evict(&s, &t, &name, &p, &body).await
                    };
                    state.writes.run(write).await
                }
                Err(s) => Err(s),
            }
        }
        Ok(t) if t.subresource == Some(Subresource::Scale) => {
            let name = t.name.clone().unwrap_or_default();
            match method {
                Method::GET => scale::get(&state, &t, &name).await,
                _ => {
                    let patch = match method {
                        Method::PATCH => Some(PatchType::from_content_type(content_type.as_deref())),
                        _ => None,
                    };
                    match (patch.transpose(), write_params()) {
                        (Ok(patch), Ok(p)) => {
                            let (s, body) = (state.clone(), body.clone());
                            let write = move || async move {
                                let body = match patch {
                                    Some(_) => body,
                                    None => bytes::Bytes::from(
                                        media::json_body(content_type.as_deref(), &body, Some(scale::SCALE))?
                                            .into_owned(),
                                    ),
                                };
                                scale::write(&s, &t, &name, &p, &body, patch).await
                            };
                            state.writes.run(write).await
                        }
                        (Err(s), _) | (_, Err(s)) => Err(s),
                    }
                }
            }
        }
        Ok(t) => match (method, t.name.clone()) {
            (Method::GET, name) => {
                let format = media::read_format_of(accept.as_deref(), t.resource.info.protobuf.is_some());
                match format.and_then(|f| Params::parse(query.as_deref()).map(|p| (f, p))) {
                    Ok((format, p)) => {
                        let form = match format {
                            ReadFormat::Table(version) => Form::Table(TableRequest {
                                version,
                                include: p.include_object,
                            }),
                            ReadFormat::Metadata(request) => Form::Metadata(request),
                            ReadFormat::Protobuf => Form::Protobuf,
                            ReadFormat::Json => Form::Json,
                        };
                        // A LIST or GET must end within the request timeout, as the
                        // apiserver's; its body holds the deadline, so that it never ends a
                        // later request of the connection. (A GET by name with `watch=1` is a
                        // GET, as in the apiserver.)
                        let deadline = (!p.watch || name.is_some()).then(|| {
                            conn.end_request_after(state.config.request_timeout, state.config.shutdown_grace)
                        });
                        let answer = match name {
                            None if p.watch => reads::watch(&state, &conn, &t, &p, form).await,
                            None => reads::list(&state, &t, &p, form).await,
                            Some(name) => reads::get(&t, &name, &p, form).await,
                        };
                        match deadline {
                            Some(deadline) => answer.map(|r| {
                                r.map(|body| {
                                    Body::new(UntilDeadline {
                                        body,
                                        _deadline: deadline,
                                    })
                                })
                            }),
                            None => answer,
                        }
                    }
                    Err(s) => Err(s),
                }
            }
            (Method::POST, None) => match write_params() {
                Ok(p) => {
                    let (s, body) = (state.clone(), body.clone());
                    let write = move || async move {
                        let body =
                            media::json_body(content_type.as_deref(), &body, t.resource.info.protobuf)?;
                        writes::create(&s, &t, &p, &body).await
                    };
                    state.writes.run(write).await
                }
                Err(s) => Err(s),
            },
            (Method::PUT, Some(name)) => match write_params() {
                Ok(p) => {
                    let (s, body) = (state.clone(), body.clone());
                    let write = move || async move {
                        let body =
                            media::json_body(content_type.as_deref(), &body, t.resource.info.protobuf)?;
                        writes::update(&s, &t, &name, &p, &body).await
                    };
                    state.writes.run(write).await
                }
                Err(s) => Err(s),
            },
            (Method::PATCH, Some(name)) => {
                match (
                    PatchType::from_content_type(content_type.as_deref()),
                    write_params(),
                ) {
                    (Ok(ty), Ok(p)) => {
                        let (s, body) = (state.clone(), body.clone());
                        let write = move || async move { writes::patch(&s, &t, &name, &p, ty, &body).await };
                        state.writes.run(write).await
                    }
                    (Err(s), _) | (_, Err(s)) => Err(s),
                }
            }
            (Method::DELETE, None) => match (
                Params::parse(query.as_deref()),
                delete_body().and_then(|b| DeleteParams::parse(query.as_deref(), &b)),
            ) {
                (Ok(p), Ok(d)) => {
                    let s = state.clone();
                    let write = move || async move { writes::delete_collection(&s, &t, &p, &d).await };
                    state.writes.run(write).await
                }
                (Err(s), _) | (_, Err(s)) => Err(s),
            },
            (Method::DELETE, Some(name)) => {
                match delete_body().and_then(|b| DeleteParams::parse(query.as_deref(), &b)) {
                    Ok(p) => {
                        let s = state.clone();
                        let write = move || async move { writes::delete(&s, &t, &name, &p).await };
                        state.writes.run(write).await
                    }
                    Err(s) => Err(s),
                }
            }
            (m, _) => Err(Status::method_not_allowed(format!(
                "method {m} is not supported on this path"
            ))),
        },
        Err(s) => Err(s),
    };
    let response = result.unwrap_or_else(|s| status_response(&s));
    let transcoded = is_write || subresource.as_deref() == Some("scale");
    match (transcoded, media::read_format(accept.as_deref()), served) {
        (true, Ok(ReadFormat::Protobuf), Some(r)) => protobuf_write_response(response, &r.info).await,
        (true, Ok(ReadFormat::Metadata(m)), Some(r)) => metadata_write_response(response, m, &r.info).await,
        _ => response,
    }
}

/// A write's answer as a PartialObjectMetadata, for a client that asked for the metadata
/// alone (client-go's and kube-rs's metadata clients patch so): the object the write answered
/// with, reduced to its metadata. Errors and Statuses, and answers of other shapes, stay as
/// they are.
async fn metadata_write_response(
    response: Response,
    m: crate::handlers::reads::partial::MetadataRequest,
    info: &ResourceInfo,
) -> Response {
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/json");
    if !response.status().is_success() || !is_json || m.list {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return status_response(&Status::internal("a write's answer could not be read"));
    };
    #[derive(serde::Deserialize)]
    struct Kind<'a> {
        #[serde(borrow, default)]
        kind: Option<&'a str>,
    }
    let of_kind =
        serde_json::from_slice::<Kind<'_>>(&bytes).is_ok_and(|k| k.kind == Some(info.kind.as_str()));
    let mut out = bytes::BytesMut::new();
    if !of_kind || m.write_object(&bytes, &mut out).is_err() {
        return Response::from_parts(parts, Body::from(bytes));
    }
    parts
        .headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(m.content_type()));
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(out.freeze()))
}

/// A LIST's or GET's body, holding its request deadline for as long as it lives.
struct UntilDeadline {
    body: Body,
    _deadline: RequestDeadline,
}

impl http_body::Body for UntilDeadline {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A write's answer in protobuf, for a client that prefers it: the object (or Status) the
/// write answered with in JSON, transcoded. Errors, and answers of other shapes (the list a
/// DeleteCollection returns), stay JSON, which every client reads by its Content-Type.
async fn protobuf_write_response(response: Response, info: &ResourceInfo) -> Response {
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/json");
    if !response.status().is_success() || !is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return status_response(&Status::internal("a write's answer could not be read"));
    };
    let object: Option<serde_json::Map<String, serde_json::Value>> = serde_json::from_slice(&bytes).ok();
    let transcoded = object.and_then(|o| {
        let kind = o.get("kind")?.as_str()?;
        let api_version = o.get("apiVersion")?.as_str()?;
        let definition = match kind {
            "Status" => openapi::STATUS,
            "Scale" => scale::SCALE,
            k if k == info.kind => info.protobuf?,
            _ => return None,
        };
        // The answer is JSON text already: transcoded as it is.
        let raw = protobuf::encode_json_text(definition, &bytes).ok()?;
        Some(protobuf::envelope(api_version, kind, &raw))
    });
    match transcoded {
        Some(body) => {
            parts
                .headers
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(protobuf::PROTOBUF));
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(body))
        }
        None => Response::from_parts(parts, Body::from(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_come_from_a_closed_set() {
        assert_eq!(verb(&Method::GET, "watch=1&resourceVersion=0"), "WATCH");
        assert_eq!(verb(&Method::GET, "limit=500"), "GET");
        assert_eq!(verb(&Method::DELETE, ""), "DELETE");
        for m in ["X1", "X2", "PROPFIND", "CONNECT"] {
            let m = Method::from_bytes(m.as_bytes()).unwrap();
            assert_eq!(verb(&m, ""), "OTHER", "{m}");
        }
    }

    /// One request over HTTP/1.1 on a new connection: the response's status line and body.
    pub(crate) async fn http1(addr: std::net::SocketAddr, request: String) -> (String, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        c.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        c.read_to_end(&mut answer).await.unwrap();
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        (
            head.lines().next().unwrap_or_default().to_owned(),
            body.to_owned(),
        )
    }

    #[tokio::test]
    async fn a_path_under_an_api_prefix_that_names_no_resource_is_not_found_under_rbac() {
        let config = crate::ServeConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            authorization_mode: crate::auth::AuthorizationMode::Rbac,
            ..crate::ServeConfig::default()
        };
        let server = crate::Server::start(config).await.unwrap();
        for path in ["/api/v1/watch", "/apis/apps/v1/watch/", "/api/v1/watch/"] {
            let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let (status, body) = http1(server.addr(), request).await;
            assert_eq!(status, "HTTP/1.1 404 Not Found", "{path}: {body}");
            let body: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(body["kind"], "Status", "{path}");
            assert_eq!(body["reason"], "NotFound", "{path}");
        }
        server.shutdown().await.unwrap();
    }
}
