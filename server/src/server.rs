//! [`Server`]: binds, seeds the workload, starts one cache per resource and serves the router
//! until shut down.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use axum::Router;
use axum::serve::Listener;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;
use watchcache_core::MemorySource;

use crate::auth::PolicySource;
use crate::auth::{Authenticator, Authorizer, TokenFile};
use crate::store::backend::Backend;

use crate::audit::{AuditLog, Policy};
use crate::config::{AuditConfig, PlaintextRefused, ServeConfig};
use crate::controllers::namespace_controller;
use crate::controllers::pod_gc;
use crate::controllers::rbac_objects;
use crate::controllers::rbac_objects::policy::CachedPolicy;
use crate::handlers::app::AppState;
use crate::handlers::routes;
use crate::handlers::writes::namespaces;
use crate::handlers::writes::offload::{InFlight, Offload};
use crate::metrics::Metrics;
use crate::store::leases::Leases;
use crate::store::resources;
use crate::transport::cert_dir::CertDir;
use crate::transport::connection::KillableListener;
use crate::transport::switch::Switch;
use crate::transport::{H2Gauges, Tls, TlsFiles, Transport};
use crate::workload;
use watchcache_api::Registry;
use watchcache_api::openapi::OpenApi;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(#[from] watchcache_core::BuildError),
    /// The store could not be reached, or this build cannot reach it.
    #[error("{0}")]
    Store(String),
    /// The `--token-auth-file` could not be read or parsed.
    #[error("{0}")]
    TokenFile(#[from] crate::auth::TokenFileError),
    /// Plaintext on an address other than loopback, not asked for.
    #[error(transparent)]
    Plaintext(#[from] PlaintextRefused),
    /// The TLS configuration cannot be used: the files, or the flags.
    #[error("TLS: {0}")]
    Tls(String),
    /// The audit log could not be opened, or its policy is invalid.
    #[error("audit log: {0}")]
    Audit(String),
    /// The registry lacks a kind the server needs.
    #[error("registry: {0}")]
    Registry(String),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// Serves connections from `listener` with `app` (TLS or plaintext, HTTP/1.1 or HTTP/2: see
/// `transport/`) until `shutdown`, then stops accepting, asks every connection to end after
/// its current responses (watches end at shutdown on their own; HTTP/2 connections get
/// GOAWAY) and waits for them to close.
///
/// Rather than `axum::serve`: its connection tasks each poll one channel shared by the whole
/// server for the shutdown signal, locking that channel's waiter list whenever a watch event
/// wakes them. Here each connection checks a flag and registers with the shutdown token only
/// when its waker changes (see `switch.rs`).
///
/// At most `max_connections` are open at once: one accepted past that is closed at once (the
/// client sees its connection reset or closed before any answer) and counted in `refused`.
async fn serve(
    mut listener: KillableListener,
    app: Router,
    transport: Arc<Transport>,
    shutdown: Switch,
    max_connections: usize,
    refused: Counter,
) -> std::io::Result<()> {
    let connections = TaskTracker::new();
    let places = Arc::new(Semaphore::new(max_connections.min(Semaphore::MAX_PERMITS)));
    loop {
        let (io, conn) = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.thrown() => break,
        };
        let Ok(place) = Arc::clone(&places).try_acquire_owned() else {
            refused.inc();
            tracing::debug!(peer = %conn.peer(), max_connections, "too many connections: closed");
            drop((io, conn));
            continue;
        };
        let (transport, app, stop) = (Arc::clone(&transport), app.clone(), shutdown.signal());
        connections.spawn(async move {
            transport.serve(io, conn, app, stop).await;
            drop(place);
        });
    }
    connections.close();
    connections.wait().await;
    Ok(())
}

/// The TLS a configuration asks for: its certificate files (made first in `--cert-dir`),
/// read now; none for plaintext.
fn tls(config: &ServeConfig) -> Result<(Option<Tls>, Option<CertDir>), ServeError> {
    let (files, dir) = match (
        &config.tls_cert_file,
        &config.tls_private_key_file,
        &config.cert_dir,
    ) {
        (Some(cert), Some(key), _) => (
            TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: config.client_ca_file.clone(),
            },
            None,
        ),
        (None, None, Some(dir)) => {
            let dir = CertDir::ensure(dir, config.addr.ip()).map_err(ServeError::Tls)?;
            let files = TlsFiles {
                cert: dir.cert(),
                key: dir.key(),
                client_ca: config.client_ca_file.clone().or_else(|| Some(dir.ca())),
            };
            (files, Some(dir))
        }
        (None, None, None) if config.client_ca_file.is_some() => {
            return Err(ServeError::Tls(
                "--client-ca-file needs TLS: add --tls-cert-file and --tls-private-key-file, or --cert-dir"
                    .into(),
            ));
        }
        (None, None, None) => return Ok((None, None)),
        _ => {
            return Err(ServeError::Tls(
                "--tls-cert-file and --tls-private-key-file go together".into(),
            ));
        }
    };
    Ok((Some(Tls::new(&files).map_err(ServeError::Tls)?), dir))
}

/// The CA that signed the serving certificate, as PEM, published in each namespace's
/// `kube-root-ca.crt`: `--cert-dir`'s CA, or the last certificate of `--tls-cert-file` (the
/// top of its chain; the certificate itself when self-signed). `None` without TLS.
fn root_ca(config: &ServeConfig, cert_dir: Option<&CertDir>) -> Option<String> {
    let path = match cert_dir {
        Some(dir) => dir.ca(),
        None => config.tls_cert_file.clone()?,
    };
    let pem = std::fs::read_to_string(path).ok()?;
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    let last = pem.rfind(BEGIN)?;
    let end = pem[last..].find("-----END CERTIFICATE-----")? + last + "-----END CERTIFICATE-----".len();
    Some(format!("{}\n", &pem[last..end]))
}

/// The audit log `config` asks for, counting into `metrics`.
fn open_audit(config: &AuditConfig, metrics: &Metrics) -> Result<AuditLog, ServeError> {
    let policy = match &config.policy_file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| Policy::parse(&text))
            .map_err(|e| ServeError::Audit(format!("policy file {}: {e}", path.display())))?,
        None => Policy::everything(),
    };
    let errors = metrics
        .audit_errors
        .get_or_create(&vec![("plugin", "log".to_owned())])
        .clone();
    AuditLog::start(config, policy, metrics.audit_events.clone(), errors)
        .map_err(|e| ServeError::Audit(format!("cannot open {}: {e}", config.path.display())))
}

/// How long shutdown waits for the audit log's last events to be written.
const AUDIT_FLUSH: std::time::Duration = std::time::Duration::from_secs(5);

/// A running server.
pub struct Server {
    addr: SocketAddr,
    store: Backend,
    state: Arc<AppState>,
    /// Ends every connection at once: thrown when the grace period of a shutdown runs out.
    kill_all: Switch,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// Binds, seeds the workload and starts serving on the current tokio runtime, on an
    /// embedded store that keeps the last `max(4 × history, 1024)` revisions (or
    /// `embedded_revisions`) and at most
    /// `history_bytes` of changed values (as an apiserver compacts etcd), so churn does not
    /// grow memory without bound.
    ///
    /// With `config.etcd` set, on that etcd cluster instead (the `etcd` feature), compacting
    /// it every `compaction_interval` in turn with every other replica.
    pub async fn start(config: ServeConfig) -> Result<Server, ServeError> {
        config.check_exposure()?;
        if !config.etcd.is_empty() {
            return Server::start_on_etcd(config).await;
        }
        let retention = config
            .embedded_revisions
            .unwrap_or_else(|| (config.history as u64 * 4).max(1024));
        let store = MemorySource::with_limits(None, Some(retention), Some(config.history_bytes));
        Server::start_with(config, Backend::Memory(store)).await
    }

    #[cfg(feature = "etcd")]
    async fn start_on_etcd(config: ServeConfig) -> Result<Server, ServeError> {
        let tls = match (&config.etcd_cafile, &config.etcd_certfile, &config.etcd_keyfile) {
            (None, None, None) => None,
            (ca, cert, key) => Some(
                watchcache_etcd::EtcdTls::from_files(ca.as_deref(), cert.as_deref(), key.as_deref())
                    .map_err(ServeError::Store)?,
            ),
        };
        let options = watchcache_etcd::EtcdOptions {
            tls,
            ..watchcache_etcd::EtcdOptions::default()
        };
        let etcd = watchcache_etcd::EtcdSource::connect(&config.etcd, options)
            .await
            .map_err(|e| ServeError::Store(format!("cannot reach etcd at {}: {e}", config.etcd.join(","))))?;
        let server = Server::start_with(config.clone(), Backend::Etcd(etcd.clone())).await?;
        // Every replica learns of every compaction; those with an interval take turns making
        // them.
        let mut tasks = vec![tokio::spawn(etcd.clone().follow_compactions())];
        if !config.compaction_interval.is_zero() {
            tasks.push(tokio::spawn(etcd.compact_every(config.compaction_interval)));
        }
        let stop = server.state.shutdown.token();
        tokio::spawn(async move {
            stop.cancelled().await;
            tasks.iter().for_each(tokio::task::JoinHandle::abort);
        });
        Ok(server)
    }

    #[cfg(not(feature = "etcd"))]
    async fn start_on_etcd(_config: ServeConfig) -> Result<Server, ServeError> {
        Err(ServeError::Store(
            "this build has no etcd support: rebuild with the `etcd` feature \
             (cargo run --release -p watchcache-server --features etcd -- serve --etcd URL), which needs protoc \
             (apt-get install -y protobuf-compiler)"
                .into(),
        ))
    }

    /// As [`start`](Self::start), over a given store (on the embedded store, expiring its
    /// leases as they come due while the server runs).
    pub async fn start_with(config: ServeConfig, store: Backend) -> Result<Server, ServeError> {
        Server::start_with_registry(config, store, Registry::builtin()).await
    }

    /// As [`start_with`](Self::start_with), serving the kinds of `registry`: the built-in ones
    /// ([`Registry::builtin`]) and an embedder's own ([`Registry::add`]). The namespace
    /// lifecycle, pod garbage collection and RBAC (without `config.policy`) need their kinds
    /// in it: namespaces, pods and nodes, and the four RBAC kinds.
    pub async fn start_with_registry(
        config: ServeConfig,
        store: Backend,
        registry: Registry,
    ) -> Result<Server, ServeError> {
        config.check_exposure()?;
        let (tls, cert_dir) = tls(&config)?;
        let tokens = config
            .token_auth_file
            .as_deref()
            .map(TokenFile::read)
            .transpose()?;
        let authn = Authenticator::new(tokens, config.anonymous_auth);
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
        if let Some(dir) = &cert_dir {
            dir.write_kubeconfig(addr).map_err(ServeError::Tls)?;
        }
        let metrics = Arc::new(Metrics::default());
        let transport = Arc::new(Transport::new(
            tls,
            config.http2_max_streams_per_connection,
            config.handshake_timeout,
            config.idle_timeout,
            config.http2_held_request_bytes,
            H2Gauges {
                connections: metrics.http2_connections.clone(),
                streams: metrics.http2_streams.clone(),
            },
        ));
        let work = workload::Workload {
            pods: config.seed_pods,
            nodes: config.seed_nodes,
            pod_churn: config.churn,
            node_churn: config.node_churn,
            wait: config.churn_wait,
        };
        workload::seed(&store, &work).await;
        namespaces::ensure_system(&store).await;
        rbac_objects::bootstrap::ensure(&store).await;
        let resources = resources::build(&store, &config, &metrics, &registry)?;
        let root_ca = root_ca(&config, cert_dir.as_ref());
        let shutdown = Switch::new();
        let openapi = OpenApi::build(
            resources.values().map(|r| &*r.spec),
            crate::handlers::discovery::GIT_VERSION,
        );
        let rbac: Arc<dyn PolicySource> = match config.policy.clone() {
            Some(policy) => policy,
            None => Arc::new(CachedPolicy::new(&resources).ok_or_else(|| {
                ServeError::Registry(
                    "RBAC needs the four rbac.authorization.k8s.io/v1 kinds in the registry".into(),
                )
            })?),
        };
        let authz = Authorizer::new(config.authorization_mode, rbac.clone());
        let audit = match &config.audit {
            Some(audit) => Some(Arc::new(open_audit(audit, &metrics)?)),
            None => None,
        };
        let state = Arc::new(AppState {
            store: store.clone(),
            leases: Leases::new(store.clone(), config.lease_reuse, config.lease_reuse_share),
            openapi: arc_swap::ArcSwap::from_pointee(openapi),
            resources: crate::store::resources::Resources::new(resources),
            metrics,
            config: config.clone(),
            shutdown: shutdown.clone(),
            open_watchers: Arc::new(AtomicUsize::new(0)),
            addr,
            writes: Offload::new(config.max_writes),
            mutating: InFlight::new(config.max_mutating_requests_inflight),
            authn,
            authz,
            rbac,
            audit,
            root_ca,
        });
        tokio::spawn(workload::churn(store.clone(), work, shutdown.token()));
        tokio::spawn(namespace_controller::run(state.clone()));
        tokio::spawn(pod_gc::run(state.clone()));
        tokio::spawn(crate::handlers::writes::services::repair(state.clone()));
        tokio::spawn(crate::controllers::system_objects::run(state.clone()));
        tokio::spawn(crate::controllers::crds::run(state.clone()));
        tokio::spawn(rbac_objects::aggregation::run(state.clone()));
        if let Some(memory) = store.memory() {
            // The embedded store expires its leases (Events' TTL) only when asked: it is asked
            // as each comes due, while the server runs. etcd expires its own.
            let keep = memory.clone().keep_leases();
            let stop = shutdown.token();
            tokio::spawn(async move {
                tokio::select! {
                    () = keep => {}
                    () = stop.cancelled() => {}
                }
            });
        }
        let app = routes::router(state.clone());
        let kill_all = Switch::new();
        let listener = KillableListener::new(listener, kill_all.clone());
        let refused = state.metrics.connections_refused.clone();
        let task = tokio::spawn(serve(
            listener,
            app,
            transport,
            shutdown,
            config.max_connections,
            refused,
        ));
        tracing::info!(%addr, "watchcache serving");
        Ok(Server {
            addr,
            store,
            state,
            kill_all,
            task,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The store under the caches.
    pub fn store(&self) -> &Backend {
        &self.store
    }

    /// What every handler shares, for unit tests that call the handlers directly.
    #[cfg(test)]
    pub(crate) fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.state.metrics
    }

    /// Stops accepting, ends open watches cleanly and waits for the connections to close; a
    /// connection still open after the grace period (`shutdown_grace`: a client that stopped
    /// reading, so its watch cannot even be ended) is dropped.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        self.state.shutdown.throw();
        let grace = self.state.config.shutdown_grace;
        let joined = match tokio::time::timeout(grace, &mut self.task).await {
            Ok(joined) => joined,
            Err(_) => {
                tracing::warn!(
                    ?grace,
                    "connections still open after the grace period: dropping them"
                );
                self.kill_all.throw();
                self.task.await
            }
        };
        if let Some(audit) = self.state.audit.clone() {
            // The events of the last requests, written before the process may exit.
            let _ = tokio::task::spawn_blocking(move || audit.flush_blocking(AUDIT_FLUSH)).await;
        }
        joined.unwrap_or_else(|e| Err(std::io::Error::other(e)))
    }

    /// Stops at once, as a killed process would: every connection is dropped where it stands
    /// (a watch mid-stream gets no end), and the server's tasks are told to stop (the caches
    /// and their store watches end as their last holders go, without being waited for). For
    /// fault tests; [`shutdown`](Self::shutdown) is the clean stop.
    pub async fn kill(self) -> std::io::Result<()> {
        self.kill_all.throw();
        self.state.shutdown.throw();
        self.task.await.unwrap_or_else(|e| Err(std::io::Error::other(e)))
    }

    /// Waits until the audit events of the requests answered so far are written, for
    /// tests; false if that took over `timeout` or no audit log is kept.
    pub async fn flush_audit(&self, timeout: std::time::Duration) -> bool {
        match self.state.audit.clone() {
            Some(audit) => tokio::task::spawn_blocking(move || audit.flush_blocking(timeout))
                .await
                .unwrap_or(false),
            None => false,
        }
    }

    /// Serves until `signal` completes, then shuts down gracefully.
    pub async fn run_until(self, signal: impl std::future::Future<Output = ()>) -> std::io::Result<()> {
        signal.await;
        tracing::info!("shutting down: ending open watches");
        self.shutdown().await
    }
}
