//! What `watchcache serve` can be told.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub mod service_ranges;

pub use service_ranges::{IpRange, ServiceRanges, parse_port_range};
use watchcache_core::CatchUpReads;

/// How many catch-up reads of the store a server runs at once by default.
pub const DEFAULT_CATCH_UP_READS: usize = 64;

/// The most writes in flight at once, as the apiserver's default
/// `--max-mutating-requests-inflight`.
pub(crate) const MAX_WRITES: usize = 200;

use crate::auth::AuthorizationMode;
use crate::auth::rbac::PolicySource;

/// The server's configuration; [`Default`] is what `watchcache serve` runs with.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Where to listen. Default 127.0.0.1:8080.
    pub addr: SocketAddr,
    /// History window capacity per resource, in events (a power of two). Default 4096.
    pub history: usize,
    /// How often watchers that asked for bookmarks get one. Default 60 s.
    pub bookmark_interval: Duration,
    /// The bytes of superseded object versions each resource's history may hold (its ring's
    /// entries); the embedded store's change log is bounded by the same figure. Default
    /// 256 MiB.
    pub history_bytes: usize,
    /// How long a paginated LIST's snapshot is kept after its last page, so its pages can
    /// follow one another through a burst of writes. Default 75 s.
    pub snapshot_retention: Duration,
    /// How long consistent and not-older-than reads wait for the cache. Default 3 s.
    pub fresh_timeout: Duration,
    /// The most watches open at once; more get 429. Default 100,000.
    pub max_watchers: usize,
    /// The most writes running at once on the blocking pool (default 200); as many again may
    /// wait for a place, and a write past those gets 429. Not a flag; tests lower it. Behind
    /// `max_mutating_requests_inflight`, it is reached only when that bound is higher or off.
    pub max_writes: usize,
    /// The most mutating requests (POST, PUT, PATCH, DELETE) in flight at once, from before
    /// their body is read until their answer is made (`--max-mutating-requests-inflight`,
    /// default 200 as the apiserver's; 0: no bound); one past it is answered 429 at once,
    /// but for a user in `system:masters`, let through as the apiserver lets it.
    pub max_mutating_requests_inflight: usize,
    /// Pods to create at start (about 4 KiB each), with their namespaces and nodes.
    pub seed_pods: usize,
    /// Pod updates per second after seeding.
    pub churn: f64,
    /// Nodes to seed with a status, the seeded pods spread over them, with the ConfigMaps and
    /// Secrets their kubelets watch (0: up to 100 nodes without a status).
    pub seed_nodes: usize,
    /// Node status updates per second after seeding (with `seed_nodes`).
    pub node_churn: f64,
    /// Whether the churn waits for `workload::START_KEY` to exist.
    pub churn_wait: bool,
    /// How long shutdown waits for open connections to end cleanly before it drops them, and
    /// how long past its deadline a watch whose client stopped reading keeps its connection.
    /// Default 10 s.
    pub shutdown_grace: Duration,
    /// A watch that names no `timeoutSeconds` ends after a random time between this and
    /// twice this, so that clients reconnect spread out (the apiserver's
    /// `--min-request-timeout`). Default 1800 s.
    pub min_request_timeout: Duration,
    /// etcd client URLs to follow instead of the embedded store (needs the `etcd` feature).
    /// Empty (the default): the embedded store.
    pub etcd: Vec<String>,
    /// The CA that signs etcd's serving certificates, PEM (`--etcd-cafile`, the apiserver's
    /// flag): with it, `etcd` endpoints are `https://`.
    pub etcd_cafile: Option<PathBuf>,
    /// The client certificate presented to etcd, PEM (`--etcd-certfile`).
    pub etcd_certfile: Option<PathBuf>,
    /// The client certificate's private key, PEM (`--etcd-keyfile`).
    pub etcd_keyfile: Option<PathBuf>,
    /// On etcd, how often one replica compacts etcd's history, as the apiserver does
    /// (`--etcd-compaction-interval`); zero leaves compaction to someone else. Default 5 min.
    pub compaction_interval: Duration,
    /// Whether each cache fills its history window from the store's retained history when it
    /// starts, so that clients resuming watches after a restart go on without a 410 and a
    /// relist. Default on.
    pub history_fill: bool,
    /// Whether a watch the history window cannot serve (a start below it, or a watcher the
    /// writer laps while its client still reads) catches up from the store's retained
    /// history instead of ending with 410, and how many such reads of the store run at once,
    /// shared by every resource (`--watch-catch-up-reads`; the rest wait in line). Default
    /// on, 64 reads. `None`: the apiserver's 410 and relist.
    pub catch_up: Option<CatchUpReads>,
    /// How many revisions the embedded store retains before it compacts (as an apiserver
    /// compacts etcd); `None`: `max(4 × history, 1024)`. Not a flag; tests raise it. The
    /// retained changes are also bounded by `history_bytes`.
    pub embedded_revisions: Option<u64>,
    /// A fault switch for tests, zero in service: how long each create in a namespace pauses
    /// between finding its namespace active and writing, as a slow create may, so that tests
    /// can race it against the namespace's deletion.
    pub create_delay: Duration,
    /// How long an Event lives after its last write (`--event-ttl`, the apiserver's flag):
    /// Events are written attached to a store lease that expires then, and go with it. Whole
    /// seconds, at least one. Default 1 h.
    pub event_ttl: Duration,
    /// The ranges Services get their cluster IPs and node ports from
    /// (`--service-cluster-ip-range`, `--service-node-port-range`).
    pub service_ranges: ServiceRanges,
    /// The longest a lease is shared by the writes of objects with a TTL
    /// (`--lease-reuse-duration-seconds`, the apiserver's flag); a lease is granted for the TTL
    /// plus this window, so an Event lives up to that much longer than its TTL. Zero: a lease
    /// per write. Default 60 s.
    pub lease_reuse: Duration,
    /// The audit log (`--audit-log-path`), or none.
    pub audit: Option<AuditConfig>,
    /// The most of the TTL the reuse window may be, as a fraction: 0.05, the apiserver's fixed
    /// share, so that a short TTL is stretched by little. Not a flag; tests raise it to share
    /// leases at TTLs of seconds.
    pub lease_reuse_share: f64,
    /// Bearer tokens and their users (`--token-auth-file`, the apiserver's CSV format). A file
    /// that does not parse refuses the start. None (the default): no token authenticates.
    pub token_auth_file: Option<PathBuf>,
    /// Whether requests without credentials are served as `system:anonymous`
    /// (`--anonymous-auth`); else they get 401. Default on.
    pub anonymous_auth: bool,
    /// How requests are authorized (`--authorization-mode`). Default `AlwaysAllow`.
    pub authorization_mode: AuthorizationMode,
    /// The RBAC objects RBAC mode decides on, given whole rather than read from the stored
    /// Roles and bindings. Not a flag: a seam for tests (an in-memory policy). None (the
    /// default): the stored objects.
    pub policy: Option<Arc<dyn PolicySource>>,
    /// The serving certificate, PEM (`--tls-cert-file`): with `tls_private_key_file`, the
    /// server serves TLS. Read again when the file changes.
    pub tls_cert_file: Option<PathBuf>,
    /// The serving certificate's key, PEM (`--tls-private-key-file`).
    pub tls_private_key_file: Option<PathBuf>,
    /// The CA that client certificates must chain to (`--client-ca-file`): a client
    /// certificate is asked for (not required) and its CN and O become the user. Read again
    /// when the file changes.
    pub client_ca_file: Option<PathBuf>,
    /// Where the certificates are made and kept when no `tls_cert_file` is given
    /// (`--cert-dir`): a CA, the serving certificate, an admin client certificate and
    /// `admin.kubeconfig`. The CA is the client CA unless `client_ca_file` is given.
    pub cert_dir: Option<PathBuf>,
    /// Serve plaintext on an address other than loopback. Default off: such a server refuses
    /// to start.
    pub insecure_plaintext_on_non_loopback: bool,
    /// The most concurrent streams of one HTTP/2 connection
    /// (`--http2-max-streams-per-connection`). Default 1000, what kube-apiserver sets.
    pub http2_max_streams_per_connection: u32,
    /// The longest a TLS handshake (or, on plaintext, the first bytes of a connection) may
    /// take. Default 10 s. Not a flag; tests lower it.
    pub handshake_timeout: Duration,
    /// The longest a request's body may take to arrive, from its headers' end
    /// (`--request-timeout`, the apiserver's flag and default, 60 s): a body still coming then
    /// is dropped and the request answered 504 `Timeout`. Also the longest a LIST or GET may
    /// take to be sent: past it, its stream is reset (its HTTP/1.1 connection closed).
    pub request_timeout: Duration,
    /// How long an HTTP/2 connection may stay open with no stream open on it before the
    /// server sends GOAWAY (and drops it if the client has not closed it 10 s later): 90 s,
    /// the `IdleTimeout` of the apiserver's Go server. Not a flag; tests lower it. HTTP/1 is
    /// another matter: a kept-alive HTTP/1 connection is closed unless its next request's
    /// headers have all arrived within 30 s of the last answer (hyper's header read timeout),
    /// or within this value if it is shorter.
    pub idle_timeout: Duration,
    /// The most connections open at once (`--max-connections`; the apiserver has no such
    /// flag): a connection past it is closed as it is accepted, and counted in
    /// `watchcache_connections_refused_total`. Default 100,000, as `max_watchers`: an HTTP/1
    /// watch holds a connection of its own.
    pub max_connections: usize,
    /// The most request bytes the open streams of one HTTP/2 connection may hold at once:
    /// their header lists, and the bodies being read. Default 32 MiB. Not a flag; tests lower
    /// it.
    pub http2_held_request_bytes: usize,
}

/// How the server's configuration would expose it: plaintext on an address other than
/// loopback.
#[derive(Debug, thiserror::Error)]
#[error(
    "refusing to serve plaintext on {addr}, which is not a loopback address: anyone who can reach it could read \
     and write everything. Add --tls-cert-file and --tls-private-key-file, or --cert-dir DIR (which makes \
     certificates and DIR/admin.kubeconfig), or listen on 127.0.0.1; or, knowing the risk, \
     --insecure-serve-plaintext-on-non-loopback"
)]
pub struct PlaintextRefused {
    /// The address.
    pub addr: SocketAddr,
}

impl ServeConfig {
    /// Whether the server will serve TLS.
    pub fn serves_tls(&self) -> bool {
        self.tls_cert_file.is_some() || self.cert_dir.is_some()
    }

    /// Refuses plaintext on an address other than loopback, unless asked for by
    /// `insecure_plaintext_on_non_loopback`.
    pub fn check_exposure(&self) -> Result<(), PlaintextRefused> {
        if self.addr.ip().is_loopback() || self.serves_tls() || self.insecure_plaintext_on_non_loopback {
            Ok(())
        } else {
            Err(PlaintextRefused { addr: self.addr })
        }
    }
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            history: 4096,
            bookmark_interval: Duration::from_secs(60),
            history_bytes: 256 << 20,
            snapshot_retention: Duration::from_secs(75),
            fresh_timeout: Duration::from_secs(3),
            max_watchers: 100_000,
            max_writes: MAX_WRITES,
            max_mutating_requests_inflight: MAX_WRITES,
            seed_pods: 0,
            churn: 0.0,
            seed_nodes: 0,
            node_churn: 0.0,
            churn_wait: false,
            shutdown_grace: Duration::from_secs(10),
            min_request_timeout: Duration::from_secs(1800),
            etcd: Vec::new(),
            etcd_cafile: None,
            etcd_certfile: None,
            etcd_keyfile: None,
            compaction_interval: Duration::from_secs(300),
            history_fill: true,
            catch_up: Some(CatchUpReads::new(DEFAULT_CATCH_UP_READS)),
            embedded_revisions: None,
            create_delay: Duration::ZERO,
            event_ttl: Duration::from_secs(3600),
            service_ranges: ServiceRanges::default(),
            lease_reuse: Duration::from_secs(60),
            lease_reuse_share: 0.05,
            token_auth_file: None,
            anonymous_auth: true,
            authorization_mode: AuthorizationMode::AlwaysAllow,
            policy: None,
            tls_cert_file: None,
            tls_private_key_file: None,
            client_ca_file: None,
            cert_dir: None,
            insecure_plaintext_on_non_loopback: false,
            http2_max_streams_per_connection: 1000,
            handshake_timeout: crate::transport::HANDSHAKE_TIMEOUT,
            request_timeout: Duration::from_secs(60),
            idle_timeout: crate::transport::IDLE_TIMEOUT,
            max_connections: 100_000,
            http2_held_request_bytes: crate::transport::MAX_HELD_REQUEST_BYTES,
            audit: None,
        }
    }
}

/// The audit log's configuration: the apiserver's `--audit-log-*` and `--audit-policy-file`.
#[derive(Clone, Debug)]
pub struct AuditConfig {
    /// Where events are written, one JSON line each; `-` is standard output (not rotated).
    pub path: PathBuf,
    /// The `audit.k8s.io/v1` `Policy` that gives each request its level; none: every request
    /// at `Metadata`.
    pub policy_file: Option<PathBuf>,
    /// The file is rotated when a line would take it past this many bytes
    /// (`--audit-log-maxsize` is in MB; 0 there is 100 MB, lumberjack's default, as in the
    /// apiserver).
    pub max_bytes: u64,
    /// The most rotated files kept, the oldest removed first; 0 keeps them all
    /// (`--audit-log-maxbackup`).
    pub max_backups: usize,
    /// Events waiting for the writer; past this many, events are dropped and counted in
    /// `apiserver_audit_error_total`, so that no request waits for the disk. Default 10,000
    /// (the apiserver's `--audit-log-batch-buffer-size`).
    pub queue: usize,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            path: PathBuf::from("audit.log"),
            policy_file: None,
            max_bytes: 100 << 20,
            max_backups: 0,
            queue: 10_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_is_refused_on_an_address_other_than_loopback_unless_asked_for() {
        let on = |addr: &str| ServeConfig {
            addr: addr.parse().unwrap(),
            ..ServeConfig::default()
        };
        assert!(on("127.0.0.1:8080").check_exposure().is_ok());
        assert!(on("[::1]:8080").check_exposure().is_ok());
        let refused = on("0.0.0.0:8080").check_exposure().unwrap_err().to_string();
        assert!(
            refused.contains("--tls-cert-file") && refused.contains("--cert-dir"),
            "{refused}"
        );
        assert!(on("10.1.2.3:8080").check_exposure().is_err());
        let tls = ServeConfig {
            cert_dir: Some("/tmp/x".into()),
            ..on("0.0.0.0:8080")
        };
        assert!(tls.check_exposure().is_ok());
        let insecure = ServeConfig {
            insecure_plaintext_on_non_loopback: true,
            ..on("0.0.0.0:8080")
        };
        assert!(insecure.check_exposure().is_ok());
    }
}
