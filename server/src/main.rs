//! The `watchcache` binary: `watchcache serve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use watchcache_server::config::{IpRange, ServiceRanges, parse_port_range};

use clap::{Parser, Subcommand};
use watchcache_server::auth::AuthorizationMode;
use watchcache_server::{AuditConfig, ServeConfig, ServeError, Server};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "watchcache",
    version,
    about = "A Kubernetes watch cache with shared fan-out and flat-memory LIST"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a Kubernetes-compatible API on the embedded store, or on etcd (`--etcd`).
    Serve(ServeArgs),
}

/// The largest history window a flag may ask for: each slot of every resource's ring costs
/// memory up front.
const MAX_HISTORY: usize = 1 << 20;
/// The shortest and longest durations a flag may give: shorter rounds towards zero (a zero
/// interval would panic the timer), longer overflows deadlines.
const MIN_SECONDS: f64 = 0.001;
const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

fn power_of_two(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("{e}"))?;
    if (2..=MAX_HISTORY).contains(&n) && n.is_power_of_two() {
        Ok(n)
    } else {
        Err(format!("{n} is not a power of two from 2 to {MAX_HISTORY}"))
    }
}

fn seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (MIN_SECONDS..=MAX_SECONDS).contains(&secs) {
        Ok(Duration::from_secs_f64(secs))
    } else {
        Err(format!(
            "must be a number of seconds from {MIN_SECONDS} to {MAX_SECONDS} (a year)"
        ))
    }
}

/// Like [`seconds`], or a Go duration as the apiserver's duration flags take it (`1m0s`,
/// `90s`, `1h30m`, `500ms`): whole or fractional numbers, each followed by `h`, `m`, `s` or
/// `ms`.
fn go_duration(s: &str) -> Result<Duration, String> {
    if let Ok(d) = seconds(s) {
        return Ok(d);
    }
    let bad = || format!("must be a number of seconds or a duration such as 1m0s, not {s:?}");
    let mut total = 0.0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let value: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        total += value
            * match &rest[..unit] {
                "h" => 3600.0,
                "m" => 60.0,
                "s" => 1.0,
                "ms" => 0.001,
                _ => return Err(bad()),
            };
        rest = &rest[unit..];
    }
    seconds(&total.to_string())
}

/// Like [`seconds`], and 0 too (off).
fn seconds_or_zero(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(0.0) => Ok(Duration::ZERO),
        _ => seconds(s),
    }
}

/// A whole number of seconds from `min` to a year: a time to live or a lease's reuse window,
/// which etcd's leases count in whole seconds.
fn whole_seconds(min: u64) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |s| {
        let max = MAX_SECONDS as u64;
        match s.parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(Duration::from_secs(n)),
            _ => Err(format!(
                "must be a whole number of seconds from {min} to {max} (a year)"
            )),
        }
    }
}

/// A byte count from 1 MiB to 1 TiB.
fn bytes(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("{e}"))?;
    if ((1 << 20)..=(1 << 40)).contains(&n) {
        Ok(n)
    } else {
        Err("must be a number of bytes from 1048576 (1 MiB) to 1099511627776 (1 TiB)".into())
    }
}

/// A rate a second: 0 (none), or from one an hour to 1,000,000 (a rate below that would be
/// a period too long to wait for).
fn rate(s: &str) -> Result<f64, String> {
    let r: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if r == 0.0 || (1.0 / 3600.0..=1_000_000.0).contains(&r) {
        Ok(r)
    } else {
        Err("must be 0 or a rate from 0.0003 (one an hour) to 1000000 per second".into())
    }
}

fn count(max: usize) -> impl Fn(&str) -> Result<usize, String> + Clone + Send + Sync + 'static {
    move |s| {
        let n: usize = s.parse().map_err(|e| format!("{e}"))?;
        if n <= max {
            Ok(n)
        } else {
            Err(format!("must be at most {max}"))
        }
    }
}

fn positive_count(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("{e}"))?;
    if n > 0 {
        Ok(n)
    } else {
        Err("must be at least 1".into())
    }
}

/// How log lines are written.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines (colored on a terminal).
    Text,
    /// One JSON object a line.
    Json,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// Pods to create at start (about 4 KiB each, spread over 10 namespaces and up to 100 nodes).
    #[arg(long, default_value_t = 0, value_parser = count(1_000_000))]
    seed_pods: usize,
    /// Pod updates per second after seeding.
    #[arg(long, default_value_t = 0.0, value_parser = rate)]
    churn: f64,
    /// Benchmark workload: nodes to create with a status, the seeded pods spread over them, and
    /// 16 ConfigMaps and 16 Secrets in each of the 10 namespaces (what kubelets watch).
    #[arg(long, default_value_t = 0, value_parser = count(100_000))]
    seed_nodes: usize,
    /// Benchmark workload: node status updates per second after seeding (with --seed-nodes).
    #[arg(long, default_value_t = 0.0, value_parser = rate, requires = "seed_nodes")]
    node_churn: f64,
    /// Benchmark workload: hold the churn until the ConfigMap default/churn-start exists (a
    /// benchmark creates it once its clients are connected).
    #[arg(long)]
    churn_wait: bool,
    /// History window per resource, in events (a power of two).
    #[arg(long, default_value = "4096", value_parser = power_of_two)]
    history: usize,
    /// Seconds between bookmarks to watchers that asked for them.
    #[arg(long, default_value = "60", value_parser = seconds)]
    bookmark_interval: Duration,
    /// Bytes of superseded object versions each resource's history may hold (the store's
    /// change log is bounded by the same figure).
    #[arg(long, default_value_t = 256 << 20, value_parser = bytes)]
    history_bytes: usize,
    /// Seconds a paginated LIST's snapshot is kept after its last page, for its next pages.
    #[arg(long, default_value = "75", value_parser = seconds_or_zero)]
    snapshot_retention: Duration,
    /// Seconds consistent and not-older-than reads wait for the cache.
    #[arg(long, default_value = "3", value_parser = seconds)]
    fresh_timeout: Duration,
    /// Seconds shutdown waits for connections to end cleanly before dropping them (also how
    /// long past its deadline a watch whose client stopped reading keeps its connection).
    #[arg(long, default_value = "10", value_parser = seconds)]
    shutdown_grace: Duration,
    /// Seconds: a watch without timeoutSeconds ends after a random time between this and
    /// twice this.
    #[arg(long, default_value = "1800", value_parser = seconds)]
    min_request_timeout: Duration,
    /// The most watches open at once; more get 429.
    #[arg(long, default_value_t = 100_000, value_parser = positive_count)]
    max_watchers: usize,
    /// Follow this etcd cluster instead of the embedded store: client URLs, comma-separated
    /// (needs a build with the `etcd` feature).
    #[arg(long, value_name = "URL[,URL…]", value_delimiter = ',')]
    etcd: Vec<String>,
    /// PEM file of the CA that signs etcd's serving certificates; the `--etcd` URLs are then
    /// https://.
    #[arg(long, value_name = "FILE")]
    etcd_cafile: Option<std::path::PathBuf>,
    /// PEM file of the client certificate presented to etcd (with `--etcd-keyfile`).
    #[arg(long, value_name = "FILE", requires = "etcd_keyfile")]
    etcd_certfile: Option<std::path::PathBuf>,
    /// PEM file of that client certificate's private key.
    #[arg(long, value_name = "FILE", requires = "etcd_certfile")]
    etcd_keyfile: Option<std::path::PathBuf>,
    /// On etcd, seconds between compactions (one replica compacts each time, as the apiserver
    /// does); 0 leaves compaction to someone else.
    #[arg(long, default_value = "300", value_parser = seconds_or_zero)]
    compaction_interval: Duration,
    /// Fill each cache's history window from the store's retained history at start, so that
    /// watches resumed after a restart go on without a relist (false: start empty, as the
    /// apiserver does).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    history_fill: bool,
    /// How many reads of the store's retained history may run at once, for watches the
    /// history window cannot serve (a start below it, or a client the writer laps), instead of
    /// ending with 410 and a relist. Watches over overlapping ranges share a read; the rest
    /// wait in line as long as their watch lasts, the places going round (10 s each while
    /// another waits). 0: off, the apiserver's 410.
    #[arg(long, default_value_t = watchcache_server::config::DEFAULT_CATCH_UP_READS)]
    watch_catch_up_reads: usize,
    /// Seconds an Event lives after its last write (kube-apiserver's flag and default): Events
    /// are written on a store lease that expires then.
    #[arg(long, default_value = "3600", value_parser = whole_seconds(1))]
    event_ttl: Duration,
    /// The CIDR Services' cluster IPs are allocated from (kube-apiserver's flag and default);
    /// its first address is the `kubernetes` Service's.
    #[arg(long, default_value = "10.0.0.0/24", value_parser = IpRange::parse)]
    service_cluster_ip_range: IpRange,
    /// The ports NodePort and LoadBalancer Services' node ports are allocated from, inclusive
    /// (`first-last`, or `base+size`; kube-apiserver's flag and default).
    #[arg(long, default_value = "30000-32767", value_parser = parse_port_range)]
    service_node_port_range: (u16, u16),
    /// How log lines are written to standard error: `text`, or `json` (one object a line,
    /// for a log collector).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Write audit events (`audit.k8s.io/v1` `Event`, JSON lines) to this file; `-` is
    /// standard output. None: no audit log.
    #[arg(long, value_name = "PATH")]
    audit_log_path: Option<std::path::PathBuf>,
    /// The `audit.k8s.io/v1` `Policy` (YAML) giving each request its level (None or Metadata;
    /// Request and RequestResponse audit at Metadata). Without it, every request at Metadata.
    #[arg(long, value_name = "FILE", requires = "audit_log_path")]
    audit_policy_file: Option<std::path::PathBuf>,
    /// Megabytes the audit log may grow to before it is rotated (0: 100, as the apiserver's).
    #[arg(long, default_value_t = 0, value_parser = count(1 << 20))]
    audit_log_maxsize: usize,
    /// Rotated audit logs kept, the oldest removed first (0: all).
    #[arg(long, default_value_t = 0, value_parser = count(1 << 20))]
    audit_log_maxbackup: usize,
    /// Seconds one lease is shared by the writes of Events (kube-apiserver's flag and default;
    /// at most 5% of `--event-ttl`); 0: a lease per write.
    #[arg(long, default_value = "60", value_parser = whole_seconds(0))]
    lease_reuse_duration_seconds: Duration,
    /// Bearer tokens, as kube-apiserver's flag: a CSV file of `token,user,uid,"group1,group2"`
    /// lines (the groups column may be left out). A malformed file refuses the start.
    #[arg(long, value_name = "FILE")]
    token_auth_file: Option<std::path::PathBuf>,
    /// Serve requests without credentials as `system:anonymous` (group
    /// `system:unauthenticated`); false: they get 401.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    anonymous_auth: bool,
    /// How requests are authorized: AlwaysAllow, or RBAC (by the Roles, ClusterRoles and their
    /// bindings; members of system:masters are allowed everything).
    #[arg(long, default_value = "AlwaysAllow", value_parser = authorization_mode)]
    authorization_mode: AuthorizationMode,
    /// Serve TLS with this certificate (PEM; read again when it changes), with
    /// --tls-private-key-file.
    #[arg(long, value_name = "FILE", requires = "tls_private_key_file")]
    tls_cert_file: Option<PathBuf>,
    /// The key of --tls-cert-file (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert_file")]
    tls_private_key_file: Option<PathBuf>,
    /// Ask clients for a certificate, and take one that chains to this CA (PEM; read again
    /// when it changes) as the user of its CN in the groups of its O.
    #[arg(long, value_name = "FILE")]
    client_ca_file: Option<PathBuf>,
    /// Serve TLS with certificates made in this directory at the first start and reused
    /// after: a CA (also the client CA unless --client-ca-file), a serving certificate and
    /// an admin client certificate, with DIR/admin.kubeconfig. Ignored with --tls-cert-file.
    #[arg(long, value_name = "DIR")]
    cert_dir: Option<PathBuf>,
    /// The longest a request's body may take to arrive: seconds, or a Go duration (`1m0s`);
    /// a body still coming then is dropped and the request answered 504. A LIST or GET still
    /// being sent then is cut.
    #[arg(long, default_value = "60", value_parser = go_duration)]
    request_timeout: Duration,
    /// The most mutating requests (POST, PUT, PATCH, DELETE) in flight at once, from before
    /// their body is read until their answer; one past it is answered 429. 0: no bound.
    #[arg(long, default_value_t = 200)]
    max_mutating_requests_inflight: usize,
    /// The most connections open at once; one past it is closed as it is accepted.
    #[arg(long, default_value_t = 100_000, value_parser = positive_count)]
    max_connections: usize,
    /// The most concurrent streams of one HTTP/2 connection.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    http2_max_streams_per_connection: u32,
    /// Serve plaintext on an address other than loopback: anyone who can reach it can read
    /// and write everything.
    #[arg(long)]
    insecure_serve_plaintext_on_non_loopback: bool,
}

fn authorization_mode(s: &str) -> Result<AuthorizationMode, String> {
    s.parse()
}

/// SIGINT or SIGTERM, registered now: a signal that arrives between this call and the first
/// poll of the future (the server announces itself in between) is still caught, rather than
/// killing the process with the default action.
fn termination() -> std::io::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        Ok(async move {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let Command::Serve(args) = Cli::parse().command;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match args.log_format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => logs.json().with_ansi(false).init(),
    }
    let terminated = match termination() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("watchcache: cannot handle signals: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let config = ServeConfig {
        addr: args.addr,
        history: args.history,
        bookmark_interval: args.bookmark_interval,
        fresh_timeout: args.fresh_timeout,
        max_watchers: args.max_watchers,
        max_mutating_requests_inflight: args.max_mutating_requests_inflight,
        seed_pods: args.seed_pods,
        churn: args.churn,
        seed_nodes: args.seed_nodes,
        node_churn: args.node_churn,
        churn_wait: args.churn_wait,
        shutdown_grace: args.shutdown_grace,
        min_request_timeout: args.min_request_timeout,
        history_bytes: args.history_bytes,
        snapshot_retention: args.snapshot_retention,
        etcd: args.etcd,
        etcd_cafile: args.etcd_cafile,
        etcd_certfile: args.etcd_certfile,
        etcd_keyfile: args.etcd_keyfile,
        compaction_interval: args.compaction_interval,
        history_fill: args.history_fill,
        catch_up: (args.watch_catch_up_reads > 0)
            .then(|| watchcache_core::CatchUpReads::new(args.watch_catch_up_reads)),
        event_ttl: args.event_ttl,
        service_ranges: ServiceRanges {
            ips: args.service_cluster_ip_range,
            node_ports: args.service_node_port_range,
            ..ServiceRanges::default()
        },
        lease_reuse: args.lease_reuse_duration_seconds,
        token_auth_file: args.token_auth_file,
        anonymous_auth: args.anonymous_auth,
        authorization_mode: args.authorization_mode,
        tls_cert_file: args.tls_cert_file,
        tls_private_key_file: args.tls_private_key_file,
        client_ca_file: args.client_ca_file,
        cert_dir: args.cert_dir,
        http2_max_streams_per_connection: args.http2_max_streams_per_connection,
        request_timeout: args.request_timeout,
        max_connections: args.max_connections,
        insecure_plaintext_on_non_loopback: args.insecure_serve_plaintext_on_non_loopback,
        audit: args.audit_log_path.map(|path| AuditConfig {
            path,
            policy_file: args.audit_policy_file,
            max_bytes: match args.audit_log_maxsize {
                0 => 100 << 20,
                mb => (mb as u64) << 20,
            },
            max_backups: args.audit_log_maxbackup,
            ..AuditConfig::default()
        }),
        ..ServeConfig::default()
    };
    let (tls, cert_dir) = (config.serves_tls(), config.cert_dir.clone());
    let tls_files_absent = config.tls_cert_file.is_none();
    let server = match Server::start(config).await {
        Ok(s) => s,
        // A usage error, as clap's own: exit code 2 (a configuration file that does not
        // parse, or plaintext where it is refused).
        Err(e @ (ServeError::TokenFile(_) | ServeError::Plaintext(_))) => {
            eprintln!("watchcache: {e}");
            return std::process::ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("watchcache: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // In JSON, every line of standard error is an object: the server's own line says where
    // it listens.
    if args.log_format == LogFormat::Text {
        match (tls, cert_dir) {
            (false, _) => eprintln!(
                "watchcache: serving on http://{0}\n  try: KUBECONFIG=/dev/null kubectl --server=http://{0} get pods -A",
                server.addr()
            ),
            (true, Some(dir)) if tls_files_absent => eprintln!(
                "watchcache: serving on https://{}\n  try: kubectl --kubeconfig {} get pods -A",
                server.addr(),
                dir.join("admin.kubeconfig").display()
            ),
            (true, _) => eprintln!("watchcache: serving on https://{}", server.addr()),
        }
    }
    match server.run_until(terminated).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("watchcache: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_value_is_checked_before_the_server_starts() {
        for bad in ["1e-10", "0", "-1", "NaN", "inf", "1e30", "ten"] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(seconds("0.5"), Ok(Duration::from_millis(500)));
        for bad in ["0", "1", "3", "2097152", "-2"] {
            assert!(power_of_two(bad).is_err(), "{bad}");
        }
        assert_eq!(power_of_two("4096"), Ok(4096));
        for bad in ["NaN", "-1", "inf", "1e9", "1e-20", "0.0001"] {
            assert!(rate(bad).is_err(), "{bad}");
        }
        assert_eq!((rate("0"), rate("0.5")), (Ok(0.0), Ok(0.5)));
        // A node churn without nodes to churn is refused, not ignored.
        assert!(Cli::try_parse_from(["watchcache", "serve", "--node-churn", "5"]).is_err());
        assert!(
            Cli::try_parse_from(["watchcache", "serve", "--seed-nodes", "2", "--node-churn", "5"]).is_ok()
        );
        assert!(count(10)("11").is_err() && count(10)("10") == Ok(10));
        assert!(positive_count("0").is_err() && positive_count("1") == Ok(1));
        assert!(bytes("1000").is_err() && bytes("268435456") == Ok(256 << 20));
        assert_eq!(seconds_or_zero("0"), Ok(Duration::ZERO));
        assert!(seconds_or_zero("-1").is_err() && seconds_or_zero("1e-9").is_err());
        for bad in ["0", "0.5", "1.5", "-1", "31536001", "1h", ""] {
            assert!(whole_seconds(1)(bad).is_err(), "{bad}");
        }
        assert_eq!(whole_seconds(1)("3600"), Ok(Duration::from_secs(3600)));
        assert_eq!(whole_seconds(0)("0"), Ok(Duration::ZERO));
        assert_eq!(go_duration("1m0s"), Ok(Duration::from_secs(60)));
        assert_eq!(go_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(go_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(go_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(go_duration("60"), Ok(Duration::from_secs(60)));
        for bad in ["", "0s", "m", "1x", "1m-1s", "s1", "9000h"] {
            assert!(go_duration(bad).is_err(), "{bad}");
        }
    }

    fn parses(args: &[&str]) -> bool {
        Cli::try_parse_from(["watchcache", "serve"].iter().chain(args)).is_ok()
    }

    #[test]
    fn etcd_tls_logging_and_audit_flags_are_the_apiservers() {
        assert!(parses(&[
            "--etcd=https://127.0.0.1:2379",
            "--etcd-cafile=ca.pem",
            "--etcd-certfile=client.pem",
            "--etcd-keyfile=client-key.pem",
            "--log-format=json",
            "--audit-log-path=audit.log",
            "--audit-policy-file=policy.yaml",
            "--audit-log-maxsize=10",
            "--audit-log-maxbackup=3",
        ]));
        // A certificate needs its key, and a key its certificate.
        assert!(!parses(&["--etcd-certfile=client.pem"]));
        assert!(!parses(&["--etcd-keyfile=client-key.pem"]));
        // A policy without a log is a mistake, not a no-op.
        assert!(!parses(&["--audit-policy-file=policy.yaml"]));
        assert!(!parses(&["--log-format=xml"]));
        assert!(!parses(&["--audit-log-path=a.log", "--audit-log-maxsize=-1"]));
    }
}
