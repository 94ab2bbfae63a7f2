//! Real etcd clusters for tests: each member a child process on free loopback ports with a
//! temporary data directory, killed and removed with the cluster.

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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
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
        if !available() {
            return None;
        }
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
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
        let client = format!("http://127.0.0.1:{}", m.client);
        let peer = format!("http://127.0.0.1:{}", m.peer);
        let child = Command::new(ETCD)
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

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client))
            .collect()
    }

    /// Member `i`'s client URL.
    pub fn endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].client)
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
                etcd_client::Client::connect([self.endpoint(i)], None),
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
                etcd_client::Client::connect(&running, None),
            )
            .await
                && let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(2), c.get("health", None)).await
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("etcd did not become healthy; logs in {}", self.dir.display());
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
