//! The cluster's members as one source sees them: a connection to each, which of them are in
//! rotation, which one leads, and the one rule for retrying a failed request.
//!
//! - **Rotation.** Reads and watches go round-robin to the members in rotation; writes go to
//!   the leader, so that no write is in flight on a follower when it dies (its answer would be
//!   lost with the write already proposed: a failure no one could retry). A request that fails
//!   to connect takes its member out of rotation and goes at once to another.
//! - **The probe.** A background task asks every member for its status each `probe_interval`:
//!   a member comes back into rotation when it answers, and the answers with the newest raft
//!   term name the leader. While the known leader is down, or none is known, it asks ten
//!   times as often.
//! - **Retries**, within `retry_budget` of the request's start, and only when nothing was
//!   applied: a request that never left (the connection was refused or could not be made);
//!   a request etcd refused before proposing it (`etcdserver: no leader`, which
//!   `--require-leader` gives on a member without a leader, and `etcdserver: too many
//!   requests`, both answered before the proposal in etcd 3.4); and a read that failed in any
//!   transient way, since a read changes nothing. A write that was sent and then failed
//!   (timed out, the connection reset) may have been applied and is never retried.
//! - **An election.** When the leader's connection is refused, followers may still take it
//!   for the leader for an election timeout and forward writes to it, where they are lost and
//!   time out with an answer no one can interpret. So writes wait (within the budget) until
//!   the probe hears of a new leader, and go to it; if none is named within the budget (the
//!   leader lives but this source cannot reach it), they go to the followers, which forward
//!   them.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use tokio::time::Instant;
use tracing::{debug, info, warn};
use watchcache_core::SourceError;

use crate::{EtcdOptions, tls};

/// How long a request waits before it tries again after etcd refused it or a read failed.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The probe's pace, as a fraction of `probe_interval`, while the leader is down or unknown.
const FAST_PROBES: u32 = 10;

/// What a request does to the store, which decides what may be retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Changes nothing: may be retried after any transient failure.
    Read,
    /// May change the store: retried only when it was never sent or refused unapplied.
    Write,
}

/// One member: its connection for requests, with `--require-leader` (a member cut off from its
/// leader refuses rather than serving what it last knew); one for history reads, with the same
/// options; and one for the probe, without it (so that a member without a leader still says
/// who it is and which term it is in).
///
/// History reads (catch-ups' watches from old revisions) have a connection of their own: an
/// HTTP/2 connection's flow-control window is shared by its streams, so a catch-up whose client
/// reads slowly could otherwise hold the window and stall the reflectors' watches behind it.
struct Member {
    endpoint: String,
    client: Client,
    history: Client,
    probe: Client,
}

/// Which of a member's connections a request takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Conn {
    /// Requests and the reflectors' watches.
    Requests,
    /// Watches from old revisions, read at their consumers' pace.
    History,
}

/// Where requests go. Behind one lock, taken for a few instructions per request.
struct Routing {
    health: Vec<Health>,
    /// The leader's member id, as the probe last heard it (0: none known).
    leader: u64,
    /// The next member a read or a watch tries first.
    next: usize,
}

struct Health {
    up: bool,
    /// When `up` last changed.
    since: Instant,
    /// The member's etcd id, once the probe has heard it (0 before).
    id: u64,
}

/// Where the leader is, for a write.
enum Leader {
    /// At member `i`, in rotation.
    Up(usize),
    /// Out of rotation since the instant given.
    Down(Instant),
    /// Not among this source's endpoints, or not known.
    Unknown,
}

/// The members of one cluster, shared by a source and its clones.
pub(crate) struct Members {
    members: Vec<Member>,
    routing: Mutex<Routing>,
    /// Counts the probe's rounds, so that a write waiting for a new leader wakes after each.
    probed: tokio::sync::watch::Sender<u64>,
    retry_budget: Duration,
    probe_interval: Duration,
    probe_timeout: Duration,
}

impl Members {
    /// A connection to each of `endpoints` (made when first used), and a first probe, which
    /// must hear from one member at least: the oldest version among those that answered.
    pub(crate) async fn connect(
        endpoints: &[String],
        options: &EtcdOptions,
    ) -> Result<(Arc<Self>, String), SourceError> {
        if endpoints.is_empty() {
            return Err(SourceError::Unavailable("no etcd endpoint given".into()));
        }
        let for_requests = ConnectOptions::new()
            .with_connect_timeout(options.connect_timeout)
            .with_timeout(options.request_timeout)
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
            .with_keep_alive_while_idle(true)
            .with_require_leader(true);
        let probe_timeout = options
            .connect_timeout
            .min(options.probe_interval.max(Duration::from_millis(100)));
        let for_probes = ConnectOptions::new()
            .with_connect_timeout(probe_timeout)
            .with_timeout(probe_timeout);
        let mut members = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            let tls = options.tls.as_ref();
            let for_requests =
                tls::for_endpoint(endpoint, tls, for_requests.clone()).map_err(SourceError::Unavailable)?;
            let for_probes =
                tls::for_endpoint(endpoint, tls, for_probes.clone()).map_err(SourceError::Unavailable)?;
            let bad =
                |e: etcd_client::Error| SourceError::Unavailable(format!("{endpoint}: {}", describe(&e)));
            members.push(Member {
                endpoint: endpoint.clone(),
                client: Client::connect([endpoint], Some(for_requests.clone()))
                    .await
                    .map_err(bad)?,
                history: Client::connect([endpoint], Some(for_requests))
                    .await
                    .map_err(bad)?,
                probe: Client::connect([endpoint], Some(for_probes)).await.map_err(bad)?,
            });
        }
        let now = Instant::now();
        let members = Arc::new(Members {
            routing: Mutex::new(Routing {
                health: members
                    .iter()
                    .map(|_| Health {
                        up: false,
                        since: now,
                        id: 0,
                    })
                    .collect(),
                leader: 0,
                next: 0,
            }),
            members,
            probed: tokio::sync::watch::Sender::new(0),
            retry_budget: options.retry_budget,
            probe_interval: options.probe_interval.max(Duration::from_millis(10)),
            probe_timeout,
        });
        let answers = members.probe().await;
        let mut last_error = None;
        let mut oldest: Option<String> = None;
        for answer in answers {
            match answer {
                Ok(v)
                    if oldest
                        .as_ref()
                        .is_none_or(|o| crate::version_key(&v) < crate::version_key(o)) =>
                {
                    oldest = Some(v)
                }
                Ok(_) => {}
                Err(e) => last_error = Some(e),
            }
        }
        let version = oldest.ok_or_else(|| SourceError::Unavailable(last_error.unwrap_or_default()))?;
        members.spawn_probe();
        Ok((members, version))
    }

    fn routing(&self) -> MutexGuard<'_, Routing> {
        self.routing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Member `i`'s client URL.
    pub(crate) fn endpoint(&self, i: usize) -> &str {
        &self.members[i].endpoint
    }

    /// The endpoints in rotation, in the order they were given.
    pub(crate) fn in_rotation(&self) -> Vec<String> {
        let routing = self.routing();
        self.members
            .iter()
            .zip(&routing.health)
            .filter(|(_, h)| h.up)
            .map(|(m, _)| m.endpoint.clone())
            .collect()
    }

    /// A client of the leader if it is in rotation, else of a member in rotation.
    pub(crate) fn any_client(&self) -> Client {
        let i = self
            .choose(Kind::Write)
            .unwrap_or_else(|| self.routing().rotate());
        self.members[i].client.clone()
    }

    /// Runs `op` on a member chosen for `kind`, retrying it by the module's rule; the last
    /// error once it may not be retried or the budget is spent.
    pub(crate) async fn call<T, F, Fut>(&self, kind: Kind, op: F) -> Result<T, etcd_client::Error>
    where
        F: FnMut(usize, Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.call_on(kind, Conn::Requests, op).await
    }

    /// [`call`](Members::call) on the members' `conn` connections.
    pub(crate) async fn call_on<T, F, Fut>(
        &self,
        kind: Kind,
        conn: Conn,
        mut op: F,
    ) -> Result<T, etcd_client::Error>
    where
        F: FnMut(usize, Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = Instant::now() + self.retry_budget;
        // Connection failures in a row: another member at once, until each has failed.
        let mut refused = 0;
        loop {
            let i = self.pick(kind, deadline).await;
            // Only the probe puts a member back in rotation: a request that succeeds there
            // may have been answered just before the member died.
            let member = &self.members[i];
            let client = match conn {
                Conn::Requests => member.client.clone(),
                Conn::History => member.history.clone(),
            };
            let e = match op(i, client).await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            let pause = if never_sent(&e) {
                self.set_up(i, false, &e.to_string(), Instant::now());
                refused += 1;
                if refused < self.members.len() {
                    Duration::ZERO
                } else {
                    refused = 0;
                    RETRY_PAUSE
                }
            } else if refused_unapplied(&e) || (kind == Kind::Read && transient(&e)) {
                RETRY_PAUSE
            } else {
                return Err(e);
            };
            if Instant::now() + pause >= deadline {
                return Err(e);
            }
            debug!(endpoint = %self.members[i].endpoint, ?kind, error = %e, "etcd request retried");
            tokio::time::sleep(pause).await;
        }
    }

    /// The member a request of `kind` goes to. A write whose leader is down waits for the
    /// probe to name another, until `deadline` or the leader has been down for the budget.
    async fn pick(&self, kind: Kind, deadline: Instant) -> usize {
        let mut probed = self.probed.subscribe();
        loop {
            if let Some(i) = self.choose(kind) {
                return i;
            }
            // Woken by each probe round; at the deadline, or should the probe be gone (it
            // lives as long as these members), to a member in rotation after all.
            if !matches!(
                tokio::time::timeout_at(deadline, probed.changed()).await,
                Ok(Ok(()))
            ) {
                return self.routing().rotate();
            }
        }
    }

    /// The member for `kind` now, or `None` when a write should wait for a new leader.
    fn choose(&self, kind: Kind) -> Option<usize> {
        let mut routing = self.routing();
        if kind == Kind::Write {
            match routing.leader() {
                Leader::Up(i) => return Some(i),
                Leader::Down(since) if since.elapsed() < self.retry_budget => return None,
                Leader::Down(..) | Leader::Unknown => {}
            }
        }
        Some(routing.rotate())
    }

    /// Marks member `i` in rotation or out of it (`why`), as seen at `seen`, saying so when
    /// that changes. What was seen before the last change is stale: a probe that began before a
    /// request found the member dead does not put it back.
    pub(crate) fn set_up(&self, i: usize, up: bool, why: &str, seen: Instant) {
        let mut routing = self.routing();
        let health = &mut routing.health[i];
        if health.up == up || health.since > seen {
            return;
        }
        health.up = up;
        health.since = Instant::now();
        drop(routing);
        let endpoint = &self.members[i].endpoint;
        if up {
            info!(%endpoint, "etcd member back in rotation");
        } else {
            warn!(%endpoint, reason = %why, "etcd member out of rotation");
        }
    }

    /// Asks every member for its status at once: who answers is in rotation, and the answers
    /// with the newest term name the leader. Each member's version, or why it did not answer.
    async fn probe(&self) -> Vec<Result<String, String>> {
        let began = Instant::now();
        let asks = self.members.iter().map(|m| {
            let mut client = m.probe.clone();
            async move {
                match tokio::time::timeout(self.probe_timeout, client.status()).await {
                    Ok(Ok(status)) => Ok(status),
                    Ok(Err(e)) => Err(format!(
                        "{}: {}{}",
                        m.endpoint,
                        describe(&e),
                        tls::hint(&m.endpoint, &e)
                    )),
                    Err(_) => Err(format!(
                        "{}: no status within {:?}",
                        m.endpoint, self.probe_timeout
                    )),
                }
            }
        });
        let answers = futures_util::future::join_all(asks).await;
        let mut newest = (0, 0);
        for (i, answer) in answers.iter().enumerate() {
            match answer {
                Ok(status) => {
                    if let Some(h) = status.header() {
                        self.routing().health[i].id = h.member_id();
                    }
                    if status.leader() != 0 && status.raft_term() >= newest.0 {
                        newest = (status.raft_term(), status.leader());
                    }
                    self.set_up(i, true, "", began);
                }
                Err(e) => self.set_up(i, false, e, began),
            }
        }
        self.routing().leader = newest.1;
        self.probed.send_modify(|n| *n = n.wrapping_add(1));
        answers
            .into_iter()
            .map(|a| a.map(|s| s.version().to_owned()))
            .collect()
    }

    /// Probes until every source sharing these members is dropped.
    fn spawn_probe(self: &Arc<Self>) {
        let members = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let pause = {
                    let Some(members) = members.upgrade() else {
                        return;
                    };
                    members.probe().await;
                    match members.routing().leader() {
                        Leader::Up(_) => members.probe_interval,
                        Leader::Down(..) | Leader::Unknown => members.probe_interval / FAST_PROBES,
                    }
                };
                tokio::time::sleep(pause).await;
            }
        });
    }
}

impl Routing {
    fn leader(&self) -> Leader {
        if self.leader == 0 {
            return Leader::Unknown;
        }
        match self.health.iter().position(|h| h.id == self.leader) {
            Some(i) if self.health[i].up => Leader::Up(i),
            Some(i) => Leader::Down(self.health[i].since),
            None => Leader::Unknown,
        }
    }

    /// The next member in rotation, round-robin; the next of all when none is in rotation
    /// (the probe may not have seen one come back yet).
    fn rotate(&mut self) -> usize {
        let n = self.health.len();
        let start = self.next;
        let i = (0..n)
            .map(|k| (start + k) % n)
            .find(|&i| self.health[i].up)
            .unwrap_or(start % n);
        self.next = (i + 1) % n;
        i
    }
}

/// The errors in `e`'s chain of sources, `e` first.
fn chain<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |e| e.source())
}

/// An error with its causes, each said once: the cause of a transport failure (a refused
/// certificate, a closed connection) is where what went wrong is said.
pub(crate) fn describe(e: &etcd_client::Error) -> String {
    let mut out = e.to_string();
    for cause in causes(e).into_iter().skip(1) {
        let cause = cause.to_string();
        // Layers often repeat the message of the one below.
        if !out.contains(&cause) {
            out.push_str(": ");
            out.push_str(&cause);
        }
    }
    out
}

/// The causes of an error, outermost first.
pub(crate) fn causes(e: &etcd_client::Error) -> Vec<&(dyn std::error::Error + 'static)> {
    let top: &(dyn std::error::Error + 'static) = match e {
        etcd_client::Error::GRpcStatus(s) => s,
        etcd_client::Error::TransportError(t) => t,
        _ => return Vec::new(),
    };
    chain(top).collect()
}

/// Whether the request never left: the connection to its member could not be made.
pub(crate) fn never_sent(e: &etcd_client::Error) -> bool {
    let e: &(dyn std::error::Error + 'static) = match e {
        etcd_client::Error::GRpcStatus(s) => s,
        etcd_client::Error::TransportError(t) => t,
        _ => return false,
    };
    chain(e).any(|e| e.is::<tonic::ConnectError>())
}

/// Whether etcd itself refused the request before proposing it, so nothing was applied and it
/// may go again once an election is over. etcd 3.4 answers `no leader` from its gRPC
/// interceptor, before the request reaches the server, to a client that asked for a leader;
/// and `too many requests` before proposing, when its applies lag its commits.
pub(crate) fn refused_unapplied(e: &etcd_client::Error) -> bool {
    match e {
        // Made by etcd, not by the client: a status without a local cause.
        etcd_client::Error::GRpcStatus(s) if std::error::Error::source(s).is_none() => {
            matches!(
                s.message(),
                "etcdserver: no leader" | "etcdserver: too many requests"
            )
        }
        _ => false,
    }
}

/// Whether a read that failed so may succeed if asked again: etcd said it is unavailable now
/// (no leader, the leader changed, a timeout), or the failure was the client's own (the
/// connection broke, the request timed out).
fn transient(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            s.code() == tonic::Code::Unavailable || std::error::Error::source(s).is_some()
        }
        etcd_client::Error::TransportError(_)
        | etcd_client::Error::IoError(_)
        | etcd_client::Error::WatchError(_) => true,
        _ => false,
    }
}

/// Whether a watch stream's error was the client's own (the connection to its member broke),
/// rather than etcd's answer.
pub(crate) fn broken(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => std::error::Error::source(s).is_some(),
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: tonic::Code, message: &str) -> etcd_client::Error {
        etcd_client::Error::GRpcStatus(tonic::Status::new(code, message))
    }

    #[test]
    fn what_is_retried() {
        let no_leader = status(tonic::Code::Unavailable, "etcdserver: no leader");
        assert!(refused_unapplied(&no_leader) && transient(&no_leader) && !never_sent(&no_leader));
        let busy = status(tonic::Code::ResourceExhausted, "etcdserver: too many requests");
        assert!(refused_unapplied(&busy));
        // Sent, and perhaps applied: a write is not retried; a read is.
        let timed_out = status(tonic::Code::Unavailable, "etcdserver: request timed out");
        assert!(!refused_unapplied(&timed_out) && transient(&timed_out));
        let changed = status(tonic::Code::Unavailable, "etcdserver: leader changed");
        assert!(!refused_unapplied(&changed) && transient(&changed));
        // etcd's semantic answers are final.
        let compacted = status(
            tonic::Code::OutOfRange,
            "etcdserver: mvcc: required revision has been compacted",
        );
        assert!(!refused_unapplied(&compacted) && !transient(&compacted) && !never_sent(&compacted));
        // A connection refused, as tonic reports it: the cause is in the status's sources.
        let cause: Box<dyn std::error::Error + Send + Sync> =
            Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let refused = tonic::Status::from_error(Box::new(tonic::ConnectError(cause)));
        let refused = etcd_client::Error::GRpcStatus(refused);
        assert!(never_sent(&refused) && transient(&refused) && broken(&refused));
        assert!(
            !refused_unapplied(&refused),
            "a status made by the client is not etcd's"
        );
    }

    #[test]
    fn rotation_skips_members_out_of_it_and_writes_follow_the_leader() {
        let now = Instant::now();
        let mut routing = Routing {
            health: (1..=3)
                .map(|id| Health {
                    up: true,
                    since: now,
                    id,
                })
                .collect(),
            leader: 2,
            next: 0,
        };
        let order: Vec<usize> = (0..4).map(|_| routing.rotate()).collect();
        assert_eq!(order, [0, 1, 2, 0]);
        routing.health[1].up = false;
        let order: Vec<usize> = (0..4).map(|_| routing.rotate()).collect();
        assert_eq!(order, [2, 0, 2, 0]);
        assert!(matches!(routing.leader(), Leader::Down(_)));
        routing.leader = 3;
        assert!(matches!(routing.leader(), Leader::Up(2)));
        routing.leader = 9;
        assert!(
            matches!(routing.leader(), Leader::Unknown),
            "a leader not among the endpoints"
        );
        for h in &mut routing.health {
            h.up = false;
        }
        let mut order: Vec<usize> = (0..3).map(|_| routing.rotate()).collect();
        order.sort();
        assert_eq!(order, [0, 1, 2], "with none in rotation, every member in turn");
    }
}
