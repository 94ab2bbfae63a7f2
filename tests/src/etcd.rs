//! Real etcd clusters for tests: each member a child process on free loopback ports with a
//! temporary data directory, killed and removed with the cluster; over TLS with client
//! certificates when asked ([`ClusterTls`]).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::missing;

/// The etcd binary tests start.
pub const ETCD: &str = "etcd";

/// Whether etcd is installed; says so loudly when it is not (and fails under
/// `WATCHCACHE_REQUIRE_EXTERNAL=1`).
pub fn available() -> bool {
    let ok = Command::new(ETCD)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        missing("etcd (apt-get install -y etcd-server)");
    }
    ok
}

/// A loopback port free now, chosen below the kernel's ephemeral range: a port the kernel
/// hands out (to a `:0` bind or to any outgoing connection) could be taken by a client socket
/// between this check and etcd's own bind, which fails the member's start.
fn free_port() -> u16 {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u16, ephemeral.max(12_000));
    let span = usize::from(high - low);
    // Test binaries of one run may overlap; each process starts in its own part of the range.
    let start = std::process::id() as usize * 997;
    for _ in 0..span {
        let port = low + ((start + NEXT.fetch_add(1, Ordering::Relaxed)) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {low}..{high}");
}

/// PEM files for a cluster whose members serve clients over TLS and require a client
/// certificate signed by `ca` (`--client-cert-auth`); peers still speak plain HTTP.
#[derive(Clone, Debug)]
pub struct ClusterTls {
    /// The CA that signs the serving certificate and the client certificates etcd accepts.
    pub ca: PathBuf,
    /// The members' serving certificate (for 127.0.0.1) and its key.
    pub server_cert: PathBuf,
    /// The serving certificate's key.
    pub server_key: PathBuf,
    /// A client certificate the harness itself connects with, and its key.
    pub client_cert: PathBuf,
    /// The client certificate's key.
    pub client_key: PathBuf,
}

impl ClusterTls {
    /// How the harness's own clients connect.
    fn connect_options(&self) -> etcd_client::ConnectOptions {
        let read = |p: &PathBuf| std::fs::read(p).expect("a TLS file");
        etcd_client::ConnectOptions::new().with_tls(
            etcd_client::TlsOptions::new()
                .ca_certificate(etcd_client::Certificate::from_pem(read(&self.ca)))
                .identity(etcd_client::Identity::from_pem(
                    read(&self.client_cert),
                    read(&self.client_key),
                )),
        )
    }
}

struct Member {
    name: String,
    client: u16,
    peer: u16,
    child: Option<Child>,
}

/// A running etcd cluster.
pub struct EtcdCluster {
    members: Vec<Member>,
    dir: PathBuf,
    initial: String,
    progress: String,
    /// Boxed: most clusters have none, and [`crate::Backing`] holds a cluster by value.
    tls: Option<Box<ClusterTls>>,
}

impl EtcdCluster {
    /// Starts `n` members and waits until the cluster has a leader; `None` (after a loud note)
    /// when etcd is not installed.
    pub async fn start(n: usize) -> Option<EtcdCluster> {
        EtcdCluster::start_with(n, Duration::from_secs(1)).await
    }

    /// As [`start`](EtcdCluster::start), with etcd's periodic progress notifications every
    /// `progress` (etcd's default is ten minutes).
    pub async fn start_with(n: usize, progress: Duration) -> Option<EtcdCluster> {
        EtcdCluster::launch(n, progress, None, &std::env::temp_dir()).await
    }

    /// As [`start_with`](EtcdCluster::start_with), with the members' data under `parent` (a
    /// tmpfs, so that fsyncs cost what etcd's own work costs, not the disk's).
    pub async fn start_in(n: usize, progress: Duration, parent: &std::path::Path) -> Option<EtcdCluster> {
        EtcdCluster::launch(n, progress, None, parent).await
    }

    /// As [`start`](EtcdCluster::start), serving clients over TLS on `https://` URLs and
    /// requiring client certificates signed by `tls.ca`.
    pub async fn start_tls(n: usize, tls: ClusterTls) -> Option<EtcdCluster> {
        EtcdCluster::launch(n, Duration::from_secs(1), Some(tls), &std::env::temp_dir()).await
    }

    async fn launch(
        n: usize,
        progress: Duration,
        tls: Option<ClusterTls>,
        parent: &std::path::Path,
    ) -> Option<EtcdCluster> {
        if !available() {
            return None;
        }
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = parent.join(format!(
            "watchcache-etcd-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client: free_port(),
                peer: free_port(),
                child: None,
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let progress = format!("{}ms", progress.as_millis());
        let mut cluster = EtcdCluster {
            members,
            dir,
            initial,
            progress,
            tls: tls.map(Box::new),
        };
        for i in 0..n {
            cluster.spawn(i);
        }
        cluster.wait_healthy().await;
        Some(cluster)
    }

    fn spawn(&mut self, i: usize) {
        let m = &self.members[i];
        let data = self.dir.join(&m.name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{}.log", m.name)))
            .expect("a log file");
        let client = format!("{}://127.0.0.1:{}", self.scheme(), m.client);
        let peer = format!("http://127.0.0.1:{}", m.peer);
        let mut command = Command::new(ETCD);
        if let Some(tls) = &self.tls {
            command
                .arg("--cert-file")
                .arg(&tls.server_cert)
                .arg("--key-file")
                .arg(&tls.server_key)
                .arg("--trusted-ca-file")
                .arg(&tls.ca)
                .arg("--client-cert-auth");
        }
        let child = command
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&data)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args([
                "--initial-cluster",
                &self.initial,
                "--initial-cluster-state",
                "new",
            ])
            .args(["--initial-cluster-token", "watchcache-test"])
            // Quick elections, so failover tests take seconds.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            // Periodic progress notifications (ordered with events on every version) keep a
            // quiet resource's cache current.
            .args(["--experimental-watch-progress-notify-interval", &self.progress])
            .args(["--logger", "zap", "--log-level", "warn"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd starts");
        self.members[i].child = Some(child);
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    /// How the harness's own clients connect (with its client certificate over TLS).
    fn connect_options(&self) -> Option<etcd_client::ConnectOptions> {
        self.tls.as_deref().map(ClusterTls::connect_options)
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.members.len()).map(|i| self.endpoint(i)).collect()
    }

    /// Member `i`'s client URL.
    pub fn endpoint(&self, i: usize) -> String {
        format!("{}://127.0.0.1:{}", self.scheme(), self.members[i].client)
    }

    /// The endpoints as `--etcd` takes them.
    pub fn flag(&self) -> String {
        self.endpoints().join(",")
    }

    /// Kills member `i` at once (SIGKILL).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Pauses member `i` (SIGSTOP): it holds its connections but answers nothing, as a member
    /// cut off by a partition; [`resume`](Self::resume) lets it go on (SIGCONT).
    pub fn pause(&self, i: usize) {
        self.signal(i, "-STOP");
    }

    /// Resumes a paused member `i` (SIGCONT).
    pub fn resume(&self, i: usize) {
        self.signal(i, "-CONT");
    }

    fn signal(&self, i: usize, signal: &str) {
        let Some(child) = &self.members[i].child else {
            return;
        };
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("kill(1) runs");
        assert!(status.success(), "kill {signal} of member {i}");
    }

    /// Whether member `i` runs (it may be paused).
    pub fn running(&self, i: usize) -> bool {
        self.members[i].child.is_some()
    }

    /// How many members the cluster has.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Restarts a killed member `i` on its data directory.
    pub fn restart(&mut self, i: usize) {
        assert!(self.members[i].child.is_none(), "member {i} is running");
        self.spawn(i);
    }

    /// The index of the member that leads, as the members report it.
    pub async fn leader(&self) -> Option<usize> {
        for (i, m) in self.members.iter().enumerate() {
            if m.child.is_none() {
                continue;
            }
            let Ok(Ok(mut c)) = tokio::time::timeout(
                Duration::from_secs(2),
                etcd_client::Client::connect([self.endpoint(i)], self.connect_options()),
            )
            .await
            else {
                continue;
            };
            let Ok(Ok(status)) = tokio::time::timeout(Duration::from_secs(2), c.status()).await else {
                continue;
            };
            let me = status.header().map(|h| h.member_id());
            if status.leader() != 0 && Some(status.leader()) == me {
                return Some(i);
            }
        }
        None
    }

    /// Waits until a running member leads and answers a linearizable read.
    pub async fn wait_healthy(&self) {
        let running: Vec<String> = (0..self.members.len())
            .filter(|i| self.members[*i].child.is_some())
            .map(|i| self.endpoint(i))
            .collect();
        for _ in 0..300 {
            if let Ok(Ok(mut c)) = tokio::time::timeout(
                Duration::from_secs(2),
                etcd_client::Client::connect(&running, self.connect_options()),
            )
            .await
                && let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(2), c.get("health", None)).await
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let logs: String = self
            .members
            .iter()
            .map(|m| {
                let log =
                    std::fs::read_to_string(self.dir.join(format!("{}.log", m.name))).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                format!(
                    "\n{}: {}",
                    m.name,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n    ")
                )
            })
            .collect();
        panic!(
            "etcd did not become healthy; logs in {}{logs}",
            self.dir.display()
        );
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
