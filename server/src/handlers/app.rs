//! [`AppState`]: what every request handler shares.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use crate::audit::AuditLog;
use crate::auth::{Authenticator, Authorizer, PolicySource};
use crate::config::ServeConfig;
use crate::handlers::writes::offload::{InFlight, Offload};
use crate::metrics::Metrics;
use crate::store::backend::Backend;
use crate::store::leases::Leases;
use crate::store::resources::Resources;
use crate::transport::switch::Switch;
use watchcache_api::openapi::OpenApi;

/// Shared by every request.
pub(crate) struct AppState {
    pub(crate) store: Backend,
    /// Writes of objects with a TTL (Events) go through it, to their shared lease.
    pub(crate) leases: Leases,
    pub(crate) resources: Resources,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) config: ServeConfig,
    /// Thrown when the server shuts down: watches end, connections close after their response.
    pub(crate) shutdown: Switch,
    pub(crate) open_watchers: Arc<AtomicUsize>,
    pub(crate) addr: SocketAddr,
    /// The OpenAPI documents of the served resources, and their schemas for field validation.
    pub(crate) openapi: arc_swap::ArcSwap<OpenApi>,
    /// Where writes run: off the runtime's workers, a bounded number at once.
    pub(crate) writes: Offload,
    /// The places of mutating requests in flight (`--max-mutating-requests-inflight`).
    pub(crate) mutating: InFlight,
    /// Who each request comes from.
    pub(crate) authn: Authenticator,
    /// What each request may do.
    pub(crate) authz: Authorizer,
    /// The RBAC objects, for the authorizer and the aggregation controller.
    pub(crate) rbac: Arc<dyn PolicySource>,
    /// The audit log, when one is kept.
    pub(crate) audit: Option<Arc<AuditLog>>,
    /// The CA of the serving certificate, as PEM, when serving TLS: each namespace's
    /// `kube-root-ca.crt`.
    pub(crate) root_ca: Option<String>,
}
