//! `EtcdSource`: a [`Source`] over an etcd v3 cluster, laid out as kube-apiserver lays out
//! its data, so that an apiserver run with `--storage-media-type=application/json` and any
//! number of watchcache replicas read and write the same keys.
//!
//! - **Keys.** `/registry/<resource>/<namespace>/<name>`, or `/registry/<resource>/<name>` for
//!   cluster-scoped objects (the caller passes the prefix; see
//!   [`storage_key`](watchcache_core::source::storage_key)).
//! - **Revisions.** An object's resourceVersion is its key's `mod_revision`.
//! - **Writes.** A create is a transaction on `mod_revision == 0`; an update or a delete is a
//!   transaction on the expected `mod_revision` (or on the key existing, when none is
//!   expected). A failed comparison reads the key in the same transaction, to say which of
//!   409 or 404 it is. A create or an update may attach the key to a lease
//!   ([`EtcdSource::grant_lease`]), as the apiserver stores objects with a TTL: etcd deletes
//!   every key of a lease at one revision when it expires.
//! - **Lists** are read in pages of [`LIST_PAGE`] keys (by default), all at the first page's revision.
//! - **Watches** start at a revision, with `prev_kv` and progress notifications, one gRPC
//!   watch stream per watch.
//! - **Progress.** A cache that waits for a revision asks the watch of its prefix for a
//!   progress notification. On an etcd that answers such a request out of band with its
//!   events (every 3.4 before 3.4.31 and 3.5 before 3.5.13: etcd-io/etcd #15220 and #17567),
//!   a requested notification may overtake events at or below its revision: such a source
//!   drops those (sent under watch id -1) and writes a *fence* instead, a small value at the
//!   prefix's own name without its slash (`/registry/pods` for `/registry/pods/`, which no
//!   apiserver key is). Every watch covers its prefix and that one key, so the fence's event
//!   comes on the watch's own ordered channel after every change before it: the watch yields
//!   it as a progress notification at the fence's revision. A fence moves etcd's revision
//!   past every other cache of the source, so none is written alone (the `fences` module): a
//!   *round* puts the fence key of every prefix with an open watch in one transaction, at one
//!   revision (a transaction per 128 keys, etcd's default `--max-txn-ops`); the requests made
//!   while a round is in flight share the next one; and no round is written while etcd's
//!   revision is still the requesting prefix's newest fence. One write of a few bytes per
//!   round, whatever the prefixes hold and however many caches wait; fences any replica
//!   writes serve every replica's watch.
//! - **Compaction.** [`EtcdSource::compact_every`] compacts as the apiserver does: each
//!   interval, a compare-and-swap on the version of the key `compact_rev_key` elects the
//!   one replica that compacts, at the revision the previous interval saw; every replica
//!   learns the compacted revision from the same key.
//! - **The signing key** for continue tokens is stored at [`SIGNING_KEY`], created once by
//!   whichever replica comes first, in a transaction.
//! - **Members** (the `members` module): a connection to each endpoint; reads and watches
//!   round-robin over the members in rotation, writes to the leader; a member whose
//!   connection is refused leaves rotation at once and comes back when it answers the probe;
//!   a request is retried on another member only when nothing was applied.
//! - **TLS** (the `tls` module): `https://` endpoints with the CA that signs the members'
//!   certificates and, for members that require one, a client certificate.

mod fences;
mod members;
mod tls;

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, KeyValue, KvClient, PutOptions, Txn, TxnOp,
    TxnOpResponse, WatchOptions, WatchRequestSender, WatchResponse, WatchResponseStream, WatchStream,
};
use futures_core::Stream;
use futures_util::StreamExt;
use tracing::{debug, info, warn};
use watchcache_core::{Revision, Source, SourceChange, SourceError, SourceEvent, SourceItem, SourceList};

use crate::fences::{FENCE_VALUE, FenceStore, Fences, fence_key};
use crate::members::{Kind, Members};
pub use crate::tls::EtcdTls;

/// The largest gRPC message the source decodes (gRPC's own ceiling).
const MAX_MESSAGE: usize = i32::MAX as usize;

/// Keys per page of a list; every page is read at the first one's revision.
pub const LIST_PAGE: i64 = 10_000;

/// Where the continue tokens' signing key is kept: outside every `/registry/<resource>/`
/// prefix, so no resource lists it.
pub const SIGNING_KEY: &str = "/watchcache/continue-signing-key";

/// The key whose version elects the compacting replica and whose value is the revision last
/// compacted: the apiserver's, so watchcache replicas and apiservers over one etcd take turns.
pub const COMPACT_KEY: &str = "compact_rev_key";

/// How an [`EtcdSource`] connects.
#[derive(Clone, Debug)]
pub struct EtcdOptions {
    /// Every request but a watch gives up after this long (a member that lost quorum may
    /// otherwise hold it).
    pub request_timeout: Duration,
    /// How long after its start a request may still be tried again: on another member after
    /// its connection was refused, or after etcd refused it unapplied (no leader during an
    /// election). Also how long writes wait for a new leader when the old one's connection is
    /// refused.
    pub retry_budget: Duration,
    /// How often every member is asked for its status: one out of rotation comes back when it
    /// answers, and the answers name the leader (ten times as often while the leader is down
    /// or unknown).
    pub probe_interval: Duration,
    /// Connecting to an endpoint gives up after this long.
    pub connect_timeout: Duration,
    /// Keys per page of a list (every page is read at the first one's revision).
    pub list_page: i64,
    /// Fault injection for tests: every watch response reaches the cache this much later
    /// than etcd sent it, in order, as over a slow link or from a lagging member. Zero (the
    /// default) in production.
    pub watch_delay: Duration,
    /// TLS to the members, whose endpoints are then `https://` (none: plain `http://`).
    pub tls: Option<EtcdTls>,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            request_timeout: Duration::from_secs(5),
            retry_budget: Duration::from_secs(3),
            probe_interval: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(2),
            list_page: LIST_PAGE,
            watch_delay: Duration::ZERO,
            tls: None,
        }
    }
}

/// A source over an etcd cluster. Cheap to clone: clones share the connection.
#[derive(Clone)]
pub struct EtcdSource {
    inner: Arc<Inner>,
}

struct Inner {
    members: Arc<Members>,
    endpoints: Vec<String>,
    version: String,
    ordered_progress: bool,
    /// The senders of open watches, by prefix, for progress requests (and, on an etcd whose
    /// requested notifications are not ordered, the prefixes a fence round writes for).
    watches: Mutex<Vec<(String, Weak<tokio::sync::Mutex<WatchRequestSender>>)>>,
    /// The fence rounds, on an etcd whose requested notifications are not ordered.
    fences: Fences,
    /// The newest compacted revision this replica knows of. Relaxed: a hint, raised
    /// monotonically (`fetch_max`), ordered with nothing.
    compacted: AtomicU64,
    request_timeout: Duration,
    list_page: i64,
    watch_delay: Duration,
}

impl std::fmt::Debug for EtcdSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdSource")
            .field("endpoints", &self.inner.endpoints)
            .field("version", &self.inner.version)
            .field("ordered_progress", &self.inner.ordered_progress)
            .finish_non_exhaustive()
    }
}

/// Whether etcd `version` orders requested progress notifications with events: 3.4.31 and
/// later 3.4s, 3.5.13 and later 3.5s, and every release from 3.6 on.
pub fn orders_requested_progress(version: &str) -> bool {
    let mut parts = version.trim().trim_start_matches('v').split(['.', '-', '+']);
    let mut next = || parts.next().and_then(|p| p.parse::<u64>().ok());
    match (next(), next(), next()) {
        (Some(3), Some(4), Some(patch)) => patch >= 31,
        (Some(3), Some(5), Some(patch)) => patch >= 13,
        (Some(3), Some(minor), Some(_)) => minor >= 6,
        (Some(major), Some(_), Some(_)) => major > 3,
        // Unknown: assume the worst, which is always safe.
        _ => false,
    }
}

fn unavailable(e: etcd_client::Error) -> SourceError {
    SourceError::Unavailable(e.to_string())
}

/// A write's failure, saying when it may have been applied all the same: it was sent, and the
/// answer was lost or was a timeout. The server must not try it again; its client may read.
fn write_failed(e: etcd_client::Error) -> SourceError {
    if members::never_sent(&e) || members::refused_unapplied(&e) {
        unavailable(e)
    } else {
        SourceError::Unavailable(format!("{e} (the write may have been applied)"))
    }
}

/// A write's failure when it carried `lease`: etcd refuses a put whose lease is gone (expired
/// or revoked) before applying anything, which the caller may answer by granting another.
fn leased_write_failed(e: etcd_client::Error, lease: Option<i64>) -> SourceError {
    match (lease, &e) {
        (Some(id), etcd_client::Error::GRpcStatus(s))
            if s.code() == tonic::Code::NotFound && s.message().contains("requested lease not found") =>
        {
            SourceError::NotFound(lease_name(id))
        }
        _ => write_failed(e),
    }
}

/// How a missing lease is named in [`SourceError::NotFound`], as the embedded store names its
/// own: `lease <id>`.
pub fn lease_name(id: i64) -> String {
    format!("lease {id}")
}

/// A put of `value` at `key`, attached to `lease` when given (a put without one detaches the
/// key from any lease it had, in etcd as here).
fn put(key: &str, value: &Bytes, lease: Option<i64>) -> TxnOp {
    TxnOp::put(
        key,
        value.to_vec(),
        lease.map(|id| PutOptions::new().with_lease(id)),
    )
}

/// A KV client taking responses of any size: a page of 10,000 pods is tens of MB, far above
/// gRPC's default 4 MB (the apiserver lifts the limit the same way).
fn kv(client: Client) -> KvClient {
    client.kv_client().max_decoding_message_size(MAX_MESSAGE)
}

/// Whether an etcd error says the revision asked for is compacted.
fn is_compacted(e: &etcd_client::Error) -> bool {
    e.to_string().contains("required revision has been compacted")
}

fn revision_of(header: Option<&etcd_client::ResponseHeader>) -> Result<Revision, SourceError> {
    match header {
        Some(h) if h.revision() > 0 => Ok(Revision::new(h.revision() as u64)),
        _ => Err(SourceError::Unavailable("a response without a revision".into())),
    }
}

fn rev(r: i64) -> Revision {
    Revision::new(r.max(0) as u64)
}

/// The end of the key range of everything under `prefix` (etcd's prefix end).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn item(kv: &KeyValue) -> Option<SourceItem> {
    Some(SourceItem {
        key: std::str::from_utf8(kv.key()).ok()?.to_owned(),
        value: Bytes::copy_from_slice(kv.value()),
        mod_revision: rev(kv.mod_revision()),
    })
}

impl EtcdSource {
    /// Connects to the cluster behind `endpoints` (`http://host:port`, or `https://host:port`
    /// with [`EtcdOptions::tls`]), one connection per
    /// member, and reads its version from the members that answer. Requests go to the members
    /// in rotation, and move off one whose connection is refused.
    pub async fn connect(endpoints: &[String], options: EtcdOptions) -> Result<Self, SourceError> {
        // The lowest version among the members that answer: a cluster mid-upgrade is as good as
        // its oldest member for what it promises.
        let (members, version) = Members::connect(endpoints, &options).await?;
        let ordered_progress = orders_requested_progress(&version);
        info!(
            %version, ordered_progress, endpoints = ?endpoints, in_rotation = ?members.in_rotation(),
            "connected to etcd{}",
            if ordered_progress { "" } else { " (requested progress notifications can overtake events: progress is asked for with fence writes instead)" }
        );
        let source = EtcdSource {
            inner: Arc::new(Inner {
                members,
                endpoints: endpoints.to_vec(),
                version,
                ordered_progress,
                watches: Mutex::new(Vec::new()),
                fences: Fences::default(),
                compacted: AtomicU64::new(0),
                request_timeout: options.request_timeout,
                list_page: options.list_page.max(1),
                watch_delay: options.watch_delay,
            }),
        };
        // What was compacted, as far as the apiserver-style compactor recorded it.
        let _ = source.refresh_compacted().await;
        Ok(source)
    }

    /// The etcd version the source decided its progress handling on.
    pub fn version(&self) -> &str {
        &self.inner.version
    }

    /// A client of one member (the leader, when it is known and in rotation), for callers that
    /// need more of etcd (tests, tools).
    pub fn client(&self) -> Client {
        self.inner.members.any_client()
    }

    /// The endpoints in rotation now: those whose members answered the last probe and have
    /// not refused a connection since.
    pub fn in_rotation(&self) -> Vec<String> {
        self.inner.members.in_rotation()
    }

    /// Runs a read on a member in rotation, retried within the budget after any transient
    /// failure.
    async fn reading<T, F, Fut>(&self, mut op: F) -> Result<T, etcd_client::Error>
    where
        F: FnMut(KvClient) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        self.inner.members.call(Kind::Read, |_, c| op(kv(c))).await
    }

    /// Runs the transaction `make` makes on the leader, made again for each attempt (a retry
    /// only when the attempt before was never sent, or refused unapplied).
    async fn txn(&self, make: impl Fn() -> Txn) -> Result<etcd_client::TxnResponse, SourceError> {
        self.leased_txn(None, make).await
    }

    /// As [`txn`](Self::txn), for a transaction that attaches a key to `lease`.
    async fn leased_txn(
        &self,
        lease: Option<i64>,
        make: impl Fn() -> Txn,
    ) -> Result<etcd_client::TxnResponse, SourceError> {
        self.inner
            .members
            .call(Kind::Write, |_, c| {
                let txn = make();
                async move { kv(c).txn(txn).await }
            })
            .await
            .map_err(|e| leased_write_failed(e, lease))
    }

    /// Opens a watch of `key` on a member in rotation; the stream, and the member's index.
    async fn open_watch(
        &self,
        key: &str,
        options: WatchOptions,
    ) -> Result<(WatchStream, usize), etcd_client::Error> {
        let timeout = self.inner.request_timeout;
        self.inner
            .members
            .call(Kind::Read, |i, c| {
                let options = options.clone();
                async move {
                    // The watch client takes responses of any size (one revision's events come
                    // whole).
                    let mut client = c.watch_client().max_decoding_message_size(MAX_MESSAGE);
                    match tokio::time::timeout(timeout, client.watch(key, Some(options))).await {
                        Ok(stream) => stream.map(|s| (s, i)),
                        Err(_) => Err(etcd_client::Error::WatchError(
                            "opening the watch timed out".into(),
                        )),
                    }
                }
            })
            .await
    }

    /// The value and mod revision of `key`, read linearizably.
    pub async fn get(&self, key: &str) -> Result<Option<(Bytes, Revision)>, SourceError> {
        let resp = self
            .reading(|mut kv| async move { kv.get(key, None).await })
            .await
            .map_err(unavailable)?;
        Ok(resp
            .kvs()
            .first()
            .map(|kv| (Bytes::copy_from_slice(kv.value()), rev(kv.mod_revision()))))
    }

    /// Creates `key`; `AlreadyExists` if it is there.
    pub async fn create(&self, key: &str, value: Bytes) -> Result<Revision, SourceError> {
        self.create_with_lease(key, value, None).await
    }

    /// Creates `key`, attached to `lease` when given (etcd deletes it when the lease expires);
    /// `AlreadyExists` if it is there, `NotFound` naming the lease ([`lease_name`]) if the lease
    /// is gone.
    pub async fn create_with_lease(
        &self,
        key: &str,
        value: Bytes,
        lease: Option<i64>,
    ) -> Result<Revision, SourceError> {
        let resp = self
            .leased_txn(lease, || {
                Txn::new()
                    .when([Compare::mod_revision(key, CompareOp::Equal, 0)])
                    .and_then([put(key, &value, lease)])
            })
            .await?;
        if resp.succeeded() {
            revision_of(resp.header())
        } else {
            Err(SourceError::AlreadyExists(key.to_owned()))
        }
    }

    /// Replaces `key`'s value if it exists (at mod revision `expected`, when given).
    pub async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
    ) -> Result<Revision, SourceError> {
        self.update_with_lease(key, value, expected, None).await
    }

    /// As [`update`](Self::update), attaching the key to `lease` when given; without one, the
    /// key leaves any lease it was attached to (etcd's put). `NotFound` naming the lease
    /// ([`lease_name`]) if the lease is gone.
    pub async fn update_with_lease(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
        lease: Option<i64>,
    ) -> Result<Revision, SourceError> {
        let resp = self
            .leased_txn(lease, || {
                guarded(key, expected)
                    .and_then([put(key, &value, lease)])
                    .or_else([TxnOp::get(key, None)])
            })
            .await?;
        if resp.succeeded() {
            revision_of(resp.header())
        } else {
            Err(failed_guard(key, &resp))
        }
    }

    /// Grants a lease of `ttl` (whole seconds, rounded up; etcd may raise it to its minimum,
    /// one and a half election timeouts): keys attached to it are deleted together, at one
    /// revision, when it expires. Its id. A grant is a write: it is retried only when it was
    /// never sent or refused unapplied; one lost after it was sent leaves a lease no key uses,
    /// which expires.
    pub async fn grant_lease(&self, ttl: Duration) -> Result<i64, SourceError> {
        let seconds = i64::try_from(ttl.as_secs().saturating_add(u64::from(ttl.subsec_nanos() > 0)))
            .unwrap_or(i64::MAX)
            .max(1);
        let resp = self
            .inner
            .members
            .call(Kind::Write, |_, c| async move {
                c.lease_client().grant(seconds, None).await
            })
            .await
            .map_err(write_failed)?;
        Ok(resp.id())
    }

    /// Deletes `key` if it exists (at mod revision `expected`, when given); returns the
    /// deletion's revision and the last value.
    pub async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> Result<(Revision, Bytes), SourceError> {
        let resp = self
            .txn(|| {
                guarded(key, expected)
                    .and_then([TxnOp::delete(
                        key,
                        Some(etcd_client::DeleteOptions::new().with_prev_key()),
                    )])
                    .or_else([TxnOp::get(key, None)])
            })
            .await?;
        if !resp.succeeded() {
            return Err(failed_guard(key, &resp));
        }
        let prev = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Delete(d) => d.prev_kvs().first().map(|kv| Bytes::copy_from_slice(kv.value())),
            _ => None,
        });
        match prev {
            Some(prev) => Ok((revision_of(resp.header())?, prev)),
            None => Err(SourceError::NotFound(key.to_owned())),
        }
    }

    /// The newest compacted revision this replica knows of (0 when none).
    pub fn compacted(&self) -> Revision {
        Revision::new(self.inner.compacted.load(Ordering::Relaxed))
    }

    fn learn_compacted(&self, revision: u64) {
        let before = self.inner.compacted.fetch_max(revision, Ordering::Relaxed);
        if revision > before {
            debug!(revision, "learned of a compaction");
        }
    }

    /// Reads the compaction key: the revision the last compactor compacted at.
    pub async fn refresh_compacted(&self) -> Result<Revision, SourceError> {
        let resp = self
            .reading(|mut kv| async move { kv.get(COMPACT_KEY, None).await })
            .await
            .map_err(unavailable)?;
        if let Some(r) = resp.kvs().first().and_then(parse_revision) {
            self.learn_compacted(r);
        }
        Ok(self.compacted())
    }

    /// One round of the apiserver's compaction protocol. `round` is the compaction key's
    /// version this replica last saw and `seen` the store's revision it saw then. If the key's
    /// version is still `round`, this replica wins the round: it records `seen` in the key and
    /// compacts at it. Either way it returns the version and revision to use next round.
    pub async fn compact_round(&self, round: i64, seen: Revision) -> Result<(i64, Revision), SourceError> {
        let resp = self
            .txn(|| {
                Txn::new()
                    .when([Compare::version(COMPACT_KEY, CompareOp::Equal, round)])
                    .and_then([TxnOp::put(COMPACT_KEY, seen.get().to_string(), None)])
                    .or_else([TxnOp::get(COMPACT_KEY, None)])
            })
            .await?;
        let now = revision_of(resp.header())?;
        if !resp.succeeded() {
            // Another replica won this round; its target is what is (being) compacted.
            let kv = resp.op_responses().into_iter().find_map(|r| match r {
                TxnOpResponse::Get(g) => g.kvs().first().cloned(),
                _ => None,
            });
            let Some(kv) = kv else {
                return Ok((0, now));
            };
            if let Some(r) = parse_revision(&kv) {
                self.learn_compacted(r);
            }
            return Ok((kv.version(), now));
        }
        if seen.get() > 0 {
            let started = std::time::Instant::now();
            let compacted = self
                .inner
                .members
                .call(Kind::Write, |_, c| async move {
                    kv(c).compact(seen.get() as i64, None).await
                })
                .await;
            match compacted {
                Ok(_) => {}
                Err(e) if is_compacted(&e) => {}
                Err(e) => return Err(write_failed(e)),
            }
            self.learn_compacted(seen.get());
            info!(revision = %seen, took = ?started.elapsed(), "compacted etcd");
        }
        Ok((round + 1, now))
    }

    /// Runs the compactor until the future is dropped: a round every `interval`, so etcd
    /// keeps between one and two intervals of history.
    pub async fn compact_every(self, interval: Duration) {
        let mut round = 0;
        let mut seen = Revision::ZERO;
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            match self.compact_round(round, seen).await {
                Ok((r, s)) => (round, seen) = (r, s),
                Err(e) => warn!(error = %e, "compaction round failed"),
            }
        }
    }

    /// Follows the compaction key until the future is dropped, so that this replica learns of
    /// every compaction any replica (or apiserver) makes, whether or not it compacts itself.
    pub async fn follow_compactions(self) {
        loop {
            if let Err(e) = self.follow_compactions_once().await {
                debug!(error = %e, "following the compaction key; again shortly");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn follow_compactions_once(&self) -> Result<(), SourceError> {
        let resp = self
            .reading(|mut kv| async move { kv.get(COMPACT_KEY, None).await })
            .await
            .map_err(unavailable)?;
        let from = revision_of(resp.header())?.get() as i64 + 1;
        if let Some(r) = resp.kvs().first().and_then(parse_revision) {
            self.learn_compacted(r);
        }
        let options = WatchOptions::new().with_start_revision(from);
        let (stream, member) = self.open_watch(COMPACT_KEY, options).await.map_err(unavailable)?;
        let (_sender, mut responses) = stream.split();
        while let Some(resp) = responses.next().await {
            let resp = resp.map_err(|e| self.watch_broke(member, e))?;
            if resp.canceled() {
                return Err(SourceError::Unavailable(format!(
                    "watch canceled: {}",
                    resp.cancel_reason()
                )));
            }
            for e in resp.events() {
                if let Some(r) = e.kv().and_then(parse_revision) {
                    self.learn_compacted(r);
                }
            }
        }
        Ok(())
    }

    /// Whether a member answers as part of a cluster with a leader, within `timeout`.
    pub async fn has_leader(&self, timeout: Duration) -> bool {
        let read = self.reading(|mut kv| async move {
            kv.get(COMPACT_KEY, Some(GetOptions::new().with_count_only()))
                .await
        });
        matches!(tokio::time::timeout(timeout, read).await, Ok(Ok(_)))
    }

    /// A watch on member `member` ended with `e`: the error to pass on. A broken connection
    /// takes the member out of rotation, so that the watch opened next goes to another at once
    /// (the probe puts it back if it answers).
    fn watch_broke(&self, member: usize, e: etcd_client::Error) -> SourceError {
        if members::broken(&e) {
            self.inner.members.set_up(
                member,
                false,
                &format!("a watch broke: {e}"),
                tokio::time::Instant::now(),
            );
        }
        unavailable(e)
    }

    fn register(&self, prefix: &str, sender: &Arc<tokio::sync::Mutex<WatchRequestSender>>) {
        let mut watches = self.inner.watches.lock().unwrap_or_else(|p| p.into_inner());
        watches.retain(|(_, w)| w.strong_count() > 0);
        watches.push((prefix.to_owned(), Arc::downgrade(sender)));
    }

    async fn list_at(&self, prefix: &str, at: Option<Revision>) -> Result<SourceList, SourceError> {
        let end = prefix_end(prefix);
        let mut revision = at.map_or(0, |r| r.get() as i64);
        let mut from = prefix.as_bytes().to_vec();
        let mut items = Vec::new();
        loop {
            let options = GetOptions::new()
                .with_range(end.clone())
                .with_limit(self.inner.list_page)
                .with_revision(revision);
            let page = self
                .reading(|mut kv| {
                    let (from, options) = (from.clone(), options.clone());
                    async move { kv.get(from, Some(options)).await }
                })
                .await;
            let resp = match page {
                Ok(r) => r,
                Err(e) if is_compacted(&e) => {
                    // The compacted revision is at least the one asked for + 1.
                    self.learn_compacted(revision as u64 + 1);
                    let _ = self.refresh_compacted().await;
                    return Err(SourceError::Compacted {
                        compact_revision: self.compacted(),
                    });
                }
                Err(e) => return Err(unavailable(e)),
            };
            if revision == 0 {
                revision = revision_of(resp.header())?.get() as i64;
            }
            items.extend(resp.kvs().iter().filter_map(item));
            match resp.kvs().last() {
                Some(last) if resp.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => break,
            }
        }
        Ok(SourceList {
            items,
            revision: rev(revision),
        })
    }
}

impl FenceStore for EtcdSource {
    fn watched_prefixes(&self) -> Vec<String> {
        let watches = self.inner.watches.lock().unwrap_or_else(|p| p.into_inner());
        watches
            .iter()
            .filter(|(_, w)| w.strong_count() > 0)
            .map(|(p, _)| p.clone())
            .collect()
    }

    async fn revision_now(&self) -> Result<Revision, SourceError> {
        Source::current_revision(self).await
    }

    /// Puts, not transactions on the keys' revisions: any number of fences, from any replica,
    /// at any time, is as good as one (a retried fence is harmless).
    async fn put_fences(&self, keys: Vec<String>) -> Result<Revision, SourceError> {
        let resp = self
            .txn(|| {
                let puts: Vec<TxnOp> = keys
                    .iter()
                    .map(|k| TxnOp::put(k.as_str(), FENCE_VALUE, None))
                    .collect();
                Txn::new().and_then(puts)
            })
            .await?;
        revision_of(resp.header())
    }
}

/// The revision a compaction key's value records.
fn parse_revision(kv: &KeyValue) -> Option<u64> {
    std::str::from_utf8(kv.value()).ok()?.parse().ok()
}

/// A transaction whose guard holds when `key` exists at `expected` (or at all).
fn guarded(key: &str, expected: Option<Revision>) -> Txn {
    let compare = match expected {
        Some(r) => Compare::mod_revision(key, CompareOp::Equal, r.get() as i64),
        None => Compare::version(key, CompareOp::Greater, 0),
    };
    Txn::new().when([compare])
}

/// Why a [`guarded`] transaction failed, from the read in its else branch.
fn failed_guard(key: &str, resp: &etcd_client::TxnResponse) -> SourceError {
    let current = resp.op_responses().into_iter().find_map(|r| match r {
        TxnOpResponse::Get(g) => g.kvs().first().map(|kv| rev(kv.mod_revision())),
        _ => None,
    });
    match current {
        Some(current) => SourceError::Conflict {
            key: key.to_owned(),
            current,
        },
        None => SourceError::NotFound(key.to_owned()),
    }
}

/// Orders "3.4.23" below "3.5.0" below "3.10.1".
fn version_key(v: &str) -> Vec<u64> {
    v.trim_start_matches('v')
        .split(['.', '-', '+'])
        .map_while(|p| p.parse().ok())
        .collect()
}

/// A watch on etcd: its changes a revision at a time, progress notifications the source
/// trusts, and compaction or a lost connection as errors.
pub struct EtcdWatch {
    responses: Responses,
    /// The watched prefix: changes of other keys in the watch's range are not the cache's.
    prefix: String,
    /// Kept for progress requests; the source holds it weakly.
    _sender: Arc<tokio::sync::Mutex<WatchRequestSender>>,
    pending: VecDeque<SourceEvent>,
    /// Whether requested notifications (watch id -1) are ordered with events.
    ordered_progress: bool,
    source: EtcdSource,
    /// The member the watch is on (an index into the source's endpoints).
    member: usize,
    ended: bool,
}

impl std::fmt::Debug for EtcdWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdWatch")
            .field("endpoint", &self.endpoint())
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

type Responses = Pin<Box<dyn Stream<Item = Result<WatchResponse, etcd_client::Error>> + Send>>;

/// `responses`, each passed on `delay` after it arrived, in order (see
/// [`EtcdOptions::watch_delay`]).
fn delayed(mut responses: WatchResponseStream, delay: Duration) -> Responses {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(r) = responses.next().await {
            if tx.send((tokio::time::Instant::now() + delay, r)).is_err() {
                return;
            }
        }
    });
    Box::pin(futures_util::stream::unfold(rx, |mut rx| async move {
        let (due, r) = rx.recv().await?;
        tokio::time::sleep_until(due).await;
        Some((r, rx))
    }))
}

/// The id etcd answers progress requests under.
const REQUESTED_PROGRESS_ID: i64 = -1;

impl EtcdWatch {
    /// The endpoint of the member the watch is on.
    pub fn endpoint(&self) -> &str {
        self.source.inner.members.endpoint(self.member)
    }

    /// Turns one response into events, or the error that ends the watch.
    fn take(&mut self, resp: WatchResponse) -> Result<(), SourceError> {
        if resp.canceled() {
            if resp.compact_revision() > 0 {
                self.source.learn_compacted(resp.compact_revision() as u64);
                return Err(SourceError::Compacted {
                    compact_revision: rev(resp.compact_revision()),
                });
            }
            return Err(SourceError::Unavailable(format!(
                "watch canceled: {}",
                resp.cancel_reason()
            )));
        }
        if resp.created() {
            return Ok(());
        }
        if resp.events().is_empty() {
            let trusted = self.ordered_progress || resp.watch_id() != REQUESTED_PROGRESS_ID;
            if trusted && let Ok(revision) = revision_of(resp.header()) {
                self.pending.push_back(SourceEvent::Progress { revision });
            }
            return Ok(());
        }
        // etcd sends every event of a revision (one request that changed several keys) in one
        // response: each revision goes on as one `Changes`, never split.
        for e in resp.events() {
            let Some(kv) = e.kv() else { continue };
            let Ok(key) = std::str::from_utf8(kv.key()) else {
                continue;
            };
            let prev = e.prev_kv().map(|p| Bytes::copy_from_slice(p.value()));
            let change = match e.event_type() {
                EventType::Put => SourceChange::Put {
                    key: key.to_owned(),
                    value: Bytes::copy_from_slice(kv.value()),
                    prev,
                },
                EventType::Delete => SourceChange::Delete {
                    key: key.to_owned(),
                    prev,
                },
            };
            let revision = rev(kv.mod_revision());
            if !key.starts_with(&self.prefix) {
                // A fence (or another key the watch's range takes in): everything before it
                // came first, on this ordered channel, so the source is at its revision. A
                // fence round's revision holds this prefix's fence key and any other fence
                // keys in the range (`/registry/configmaps-x` for `/registry/configmaps/`),
                // which come in this one response: one progress notification, never a change.
                // The round's keys outside the range never reach this watch.
                if !matches!(self.pending.back(), Some(e) if e.revision() >= revision) {
                    self.pending.push_back(SourceEvent::Progress { revision });
                }
                continue;
            }
            match self.pending.back_mut() {
                Some(SourceEvent::Changes { revision: r, changes }) if *r == revision => changes.push(change),
                Some(SourceEvent::Progress { revision: r }) if *r == revision => {
                    *self.pending.back_mut().expect("just matched") = SourceEvent::single(revision, change);
                }
                _ => self.pending.push_back(SourceEvent::single(revision, change)),
            }
        }
        Ok(())
    }
}

impl Stream for EtcdWatch {
    type Item = Result<SourceEvent, SourceError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(e) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(e)));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.responses).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(SourceError::Unavailable(
                        "the watch stream ended".into(),
                    ))));
                }
                Poll::Ready(Some(Err(e))) => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(this.source.watch_broke(this.member, e))));
                }
                Poll::Ready(Some(Ok(resp))) => {
                    if let Err(e) = this.take(resp) {
                        this.ended = true;
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
        }
    }
}

impl Source for EtcdSource {
    type Watch = EtcdWatch;

    async fn list(&self, prefix: &str, at: Option<Revision>) -> Result<SourceList, SourceError> {
        self.list_at(prefix, at).await
    }

    /// Watches the prefix and its fence key (see the module docs): one range from the fence
    /// key to the prefix's end.
    async fn watch(&self, prefix: &str, from: Revision) -> Result<Self::Watch, SourceError> {
        let options = WatchOptions::new()
            .with_range(prefix_end(prefix))
            .with_start_revision(from.get() as i64)
            .with_prev_key()
            .with_progress_notify();
        let start = fence_key(prefix).unwrap_or(prefix);
        let (stream, member) = self.open_watch(start, options).await.map_err(unavailable)?;
        let (sender, responses) = stream.split();
        let responses: Responses = if self.inner.watch_delay.is_zero() {
            Box::pin(responses)
        } else {
            delayed(responses, self.inner.watch_delay)
        };
        let sender = Arc::new(tokio::sync::Mutex::new(sender));
        self.register(prefix, &sender);
        debug!(prefix, %from, endpoint = self.inner.members.endpoint(member), "watching etcd");
        Ok(EtcdWatch {
            responses,
            prefix: prefix.to_owned(),
            _sender: sender,
            pending: VecDeque::new(),
            ordered_progress: self.inner.ordered_progress,
            source: self.clone(),
            member,
            ended: false,
        })
    }

    async fn current_revision(&self) -> Result<Revision, SourceError> {
        // A linearizable count of an empty range: the header carries the store's revision.
        let resp = self
            .reading(|mut kv| async move {
                kv.get(COMPACT_KEY, Some(GetOptions::new().with_count_only()))
                    .await
            })
            .await
            .map_err(unavailable)?;
        revision_of(resp.header())
    }

    /// On an etcd that orders requested notifications, a request on every open watch of
    /// `prefix`; on one that does not, a fence its watches bring back in order, written in one
    /// transaction with the fences of every other watched prefix and shared by the requests
    /// made meanwhile (see the module docs).
    async fn request_progress(&self, prefix: &str) -> Result<(), SourceError> {
        if !self.inner.ordered_progress {
            return self.inner.fences.request(self, prefix).await;
        }
        let senders: Vec<_> = {
            let watches = self.inner.watches.lock().unwrap_or_else(|p| p.into_inner());
            watches
                .iter()
                .filter(|(p, _)| p == prefix)
                .filter_map(|(_, w)| w.upgrade())
                .collect()
        };
        // Every open watch of the prefix is asked, even after one failed (its member may have
        // just died); the first failure is told.
        let mut failed = Ok(());
        for s in senders {
            if let Err(e) = s.lock().await.request_progress().await {
                failed = failed.and(Err(unavailable(e)));
            }
        }
        failed
    }

    async fn signing_key(&self) -> Result<[u8; 16], SourceError> {
        let mut fresh = [0u8; 16];
        getrandom::fill(&mut fresh).map_err(|e| SourceError::Unavailable(format!("no randomness: {e}")))?;
        // Created by the first replica; every other one reads it back.
        let resp = self
            .txn(|| {
                Txn::new()
                    .when([Compare::create_revision(SIGNING_KEY, CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(SIGNING_KEY, fresh.to_vec(), None)])
                    .or_else([TxnOp::get(SIGNING_KEY, None)])
            })
            .await?;
        if resp.succeeded() {
            return Ok(fresh);
        }
        let stored = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        });
        stored
            .and_then(|v| <[u8; 16]>::try_from(v.as_slice()).ok())
            .ok_or_else(|| SourceError::Unavailable(format!("{SIGNING_KEY} does not hold a 16-byte key")))
    }

    fn compacted_revision(&self) -> Revision {
        self.compacted()
    }

    async fn read(&self, key: &str) -> Result<(Option<SourceItem>, Revision), SourceError> {
        let resp = self
            .reading(|mut kv| async move { kv.get(key, None).await })
            .await
            .map_err(unavailable)?;
        Ok((resp.kvs().first().and_then(item), revision_of(resp.header())?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_that_order_requested_progress() {
        for v in [
            "3.4.31", "3.4.40", "3.5.13", "3.5.21", "3.6.0", "v3.6.4", "4.0.0", "3.10.1",
        ] {
            assert!(orders_requested_progress(v), "{v}");
        }
        for v in [
            "3.4.23", "3.4.30", "3.5.0", "3.5.12", "3.3.27", "", "garbage", "3.4",
        ] {
            assert!(!orders_requested_progress(v), "{v}");
        }
    }

    #[test]
    fn prefix_ends_and_version_order() {
        assert_eq!(prefix_end("/registry/pods/"), b"/registry/pods0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
        assert!(version_key("3.4.23") < version_key("3.5.0"));
        assert!(version_key("3.5.9") < version_key("3.10.1"));
    }
}
