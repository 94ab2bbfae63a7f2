//! `watchcache serve`: a Kubernetes-compatible HTTP facade over the watch cache, so that
//! kubectl and kube-rs use it as they use kube-apiserver.
//!
//! Resources `pods`, `configmaps`, `secrets` (namespaced), `namespaces` and `nodes`, each with
//! its own cache and upstream watch on the embedded [`MemorySource`]. Discovery (`/version`,
//! `/api`, `/apis`, `/api/v1`); LIST, GET and WATCH with the apiserver's parameters; POST,
//! PUT and DELETE to the source; `/healthz`, `/readyz` and `/metrics`. LIST bodies are
//! streamed in bounded chunks; watch frames are copied from shared bytes into each
//! connection's own bounded buffer.

#![warn(missing_docs)]

pub mod config;
mod discovery;
mod handlers;
pub mod metrics;
mod params;
pub mod resources;
mod watch_body;
pub mod workload;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use axum::serve::ListenerExt;
use tokio_util::sync::CancellationToken;
use watchcache_core::MemorySource;
use watchcache_encoders::Status;

pub use config::ServeConfig;
use handlers::{json_response, status_response};
pub use metrics::Metrics;
use resources::Resource;

/// Shared by every request.
pub(crate) struct AppState {
    pub(crate) store: MemorySource,
    pub(crate) resources: BTreeMap<&'static str, Arc<Resource>>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) config: ServeConfig,
    pub(crate) shutdown: CancellationToken,
    pub(crate) open_watchers: Arc<AtomicUsize>,
    pub(crate) addr: SocketAddr,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(#[from] watchcache_core::BuildError),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// A running server.
pub struct Server {
    addr: SocketAddr,
    store: MemorySource,
    state: Arc<AppState>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// Binds, seeds the workload and starts serving on the current tokio runtime, on an
    /// embedded store that keeps the last `max(4 × history, 1024)` revisions (as an apiserver
    /// compacts etcd), so churn does not grow memory without bound.
    pub async fn start(config: ServeConfig) -> Result<Server, ServeError> {
        let retention = (config.history as u64 * 4).max(1024);
        Server::start_with(config, MemorySource::with_options(None, Some(retention))).await
    }

    /// As [`start`](Self::start), over a given store.
    pub async fn start_with(config: ServeConfig, store: MemorySource) -> Result<Server, ServeError> {
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .map_err(|source| ServeError::Bind {
                addr: config.addr,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| ServeError::Bind {
            addr: config.addr,
            source,
        })?;
        workload::seed(&store, config.seed_pods);
        let resources = resources::build(&store, &config)?;
        let shutdown = CancellationToken::new();
        let metrics = Arc::new(Metrics::default());
        let state = Arc::new(AppState {
            store: store.clone(),
            resources,
            metrics,
            config: config.clone(),
            shutdown: shutdown.clone(),
            open_watchers: Arc::new(AtomicUsize::new(0)),
            addr,
        });
        tokio::spawn(workload::churn(
            store.clone(),
            config.seed_pods,
            config.churn,
            shutdown.clone(),
        ));
        let app = router(state.clone());
        // Watch frames are small writes flushed as events arrive: without TCP_NODELAY, Nagle's
        // algorithm holds a frame behind the client's delayed ACK of the previous one.
        let listener = listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::warn!(error = %e, "cannot set TCP_NODELAY");
            }
        });
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown.cancelled_owned())
                .await
        });
        tracing::info!(%addr, "watchcache serving");
        Ok(Server {
            addr,
            store,
            state,
            task,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The store under the caches.
    pub fn store(&self) -> &MemorySource {
        &self.store
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.state.metrics
    }

    /// Ends open watches cleanly, stops accepting and waits for the server to finish.
    pub async fn shutdown(self) -> std::io::Result<()> {
        self.state.shutdown.cancel();
        self.task.await.unwrap_or_else(|e| Err(std::io::Error::other(e)))
    }

    /// Serves until `signal` completes, then shuts down gracefully.
    pub async fn run_until(self, signal: impl std::future::Future<Output = ()>) -> std::io::Result<()> {
        signal.await;
        tracing::info!("shutting down: ending open watches");
        self.shutdown().await
    }
}

type AppStateRef = State<Arc<AppState>>;

fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route(
            "/version",
            get(|| async { json_response(StatusCode::OK, discovery::version().to_string()) }),
        )
        .route("/api", get(api))
        .route(
            "/apis",
            get(|| async { json_response(StatusCode::OK, discovery::apis().to_string()) }),
        )
        .route("/api/v1", get(api_v1))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route("/api/v1/{resource}", axum::routing::any(collection))
        .route("/api/v1/{resource}/{name}", axum::routing::any(cluster_object))
        .route(
            "/api/v1/namespaces/{ns}/{resource}",
            axum::routing::any(namespaced_collection),
        )
        .route(
            "/api/v1/namespaces/{ns}/{resource}/{name}",
            axum::routing::any(namespaced_object),
        )
        .fallback(|| async { status_response(&Status::not_found("", "")) })
        .layer(middleware::from_fn_with_state(state.clone(), timing))
        .with_state(state)
}

async fn api(State(state): AppStateRef) -> Response {
    json_response(
        StatusCode::OK,
        discovery::api(&state.addr.to_string()).to_string(),
    )
}

async fn api_v1(State(state): AppStateRef) -> Response {
    json_response(
        StatusCode::OK,
        discovery::api_v1(state.resources.values().map(|r| &**r)).to_string(),
    )
}

async fn readyz(State(state): AppStateRef) -> Response {
    let not_ready: Vec<&str> = state
        .resources
        .iter()
        .filter(|(_, r)| !r.cache.is_ready())
        .map(|(k, _)| *k)
        .collect();
    if not_ready.is_empty() {
        (StatusCode::OK, "ok").into_response_ok()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("caches not ready: {}", not_ready.join(", ")),
        )
            .into_response_ok()
    }
}

trait IntoResponseOk {
    fn into_response_ok(self) -> Response;
}

impl<T: axum::response::IntoResponse> IntoResponseOk for T {
    fn into_response_ok(self) -> Response {
        self.into_response()
    }
}

async fn metrics_text(State(state): AppStateRef) -> Response {
    for (name, r) in &state.resources {
        let labels = metrics::resource(name);
        state
            .metrics
            .ring_capacity
            .get_or_create(&labels)
            .set(r.cache.config().capacity as i64);
        state
            .metrics
            .ring_occupancy
            .get_or_create(&labels)
            .set(r.cache.history_len() as i64);
    }
    let mut response = state.metrics.render().into_response_ok();
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

async fn timing(State(state): AppStateRef, request: Request, next: Next) -> Response {
    let verb = match (request.method(), request.uri().query().unwrap_or_default()) {
        (&Method::GET, q) if q.contains("watch=true") || q.contains("watch=1") => "WATCH",
        (&Method::GET, _) => "GET",
        (m, _) => m.as_str(),
    }
    .to_owned();
    let start = Instant::now();
    let response = next.run(request).await;
    state
        .metrics
        .request_duration
        .get_or_create(&vec![("verb", verb)])
        .observe(start.elapsed().as_secs_f64());
    response
}

async fn collection(
    State(state): AppStateRef,
    method: Method,
    Path(resource): Path<String>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    dispatch(state, method, &resource, None, None, query, body).await
}

async fn cluster_object(
    State(state): AppStateRef,
    method: Method,
    Path((resource, name)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    dispatch(state, method, &resource, None, Some(name), query, body).await
}

async fn namespaced_collection(
    State(state): AppStateRef,
    method: Method,
    Path((ns, resource)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    dispatch(state, method, &resource, Some(ns), None, query, body).await
}

async fn namespaced_object(
    State(state): AppStateRef,
    method: Method,
    Path((ns, resource, name)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    dispatch(state, method, &resource, Some(ns), Some(name), query, body).await
}

async fn dispatch(
    state: Arc<AppState>,
    method: Method,
    resource: &str,
    ns: Option<String>,
    name: Option<String>,
    query: Option<String>,
    body: Bytes,
) -> Response {
    match handlers::target(&state, resource, ns, name) {
        Ok(t) => handlers::handle(state, method, t, query, body).await,
        Err(s) => status_response(&s),
    }
}
