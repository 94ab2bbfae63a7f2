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
//!   watch stream per watch. History reads (catch-ups) go over a connection of their own and
//!   hold at most [`EtcdOptions::history_backlog`] bytes for a slow reader.
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
//! - **Modules by job:** `writes` (the guarded transactions), `source` (the [`Source`] the
//!   caches read), `watch` (the watch streams), `compaction`, `fences`, `members`, `tls`.
//! - **TLS** (the `tls` module): `https://` endpoints with the CA that signs the members'
//!   certificates and, for members that require one, a client certificate.

mod compaction;
mod fences;
mod members;
mod source;
mod tls;
mod watch;
mod writes;

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
use watchcache_core::{
    PrevValue, Revision, Source, SourceChange, SourceError, SourceEvent, SourceItem, SourceList,
};

use crate::fences::{FENCE_VALUE, FenceStore, Fences, fence_key};
use crate::members::{Kind, Members};
pub use crate::tls::EtcdTls;
pub use crate::watch::EtcdWatch;
pub use crate::writes::lease_name;

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
    /// What a history read (a catch-up's watch from an old revision, on its own connection)
    /// keeps for a consumer that reads slower than etcd sends: once the revisions waiting to
    /// be read pass this many bytes of keys and values, the etcd watch is canceled, and it is
    /// opened again from the next revision when all but an eighth of them have been read. A
    /// batch of etcd's (up to 1,000 revisions for a watch behind) is copied out a revision at a
    /// time and its rest dropped once the backlog is full: at most this plus one revision per
    /// history read, and a batch only while it is being split. The price is etcd sending the
    /// dropped revisions again after the reopen ([`HistoryStats::dropped`]), which a batch
    /// smaller than the backlog never pays: the default, 4 MiB, holds a whole batch of
    /// revisions up to 4 KiB with their previous values.
    pub history_backlog: usize,
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
            history_backlog: HISTORY_BACKLOG,
        }
    }
}

/// The default [`EtcdOptions::history_backlog`].
pub const HISTORY_BACKLOG: usize = 4 << 20;

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
    /// The newest revision the compaction key names, learned into `compacted` once etcd
    /// refuses a read below it. Relaxed, as `compacted`.
    claimed: AtomicU64,
    request_timeout: Duration,
    list_page: i64,
    watch_delay: Duration,
    history_backlog: usize,
    /// History watches opened, and canceled for a reader behind by more than the backlog.
    /// Relaxed: counts, ordered with nothing.
    history_opened: AtomicU64,
    history_paused: AtomicU64,
    /// Bytes of keys and values history reads received from etcd, and dropped to be read
    /// again. Relaxed: counts.
    history_received: AtomicU64,
    history_dropped: AtomicU64,
    /// Bytes sent by history reads' tasks and not yet taken by their readers. Relaxed: a
    /// gauge.
    history_waiting: Arc<AtomicUsize>,
}

/// What the source's history reads did (see [`EtcdOptions::history_backlog`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HistoryStats {
    /// etcd watches opened for history reads (first opens and reopens).
    pub opened: u64,
    /// History reads whose etcd watch was canceled because their reader was behind by more
    /// than the backlog.
    pub paused: u64,
    /// Bytes of keys and values that history reads hold for their readers now: at most
    /// [`EtcdOptions::history_backlog`] plus one revision per read.
    pub waiting: usize,
    /// Bytes of keys and values history reads received from etcd.
    pub received: u64,
    /// Of those, the bytes dropped past a full backlog (the rest of a batch), which etcd
    /// sends again after the reopen.
    pub dropped: u64,
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
                claimed: AtomicU64::new(0),
                request_timeout: options.request_timeout,
                list_page: options.list_page.max(1),
                watch_delay: options.watch_delay,
                history_backlog: options.history_backlog.max(1),
                history_opened: AtomicU64::new(0),
                history_paused: AtomicU64::new(0),
                history_waiting: Arc::new(AtomicUsize::new(0)),
                history_received: AtomicU64::new(0),
                history_dropped: AtomicU64::new(0),
            }),
        };
        // What was compacted, as far as the apiserver-style compactor recorded it.
        let _ = source.refresh_compacted().await;
        Ok(source)
    }

    /// What the source's history reads did so far.
    pub fn history_stats(&self) -> HistoryStats {
        HistoryStats {
            opened: self.inner.history_opened.load(Ordering::Relaxed),
            paused: self.inner.history_paused.load(Ordering::Relaxed),
            waiting: self.inner.history_waiting.load(Ordering::Relaxed),
            received: self.inner.history_received.load(Ordering::Relaxed),
            dropped: self.inner.history_dropped.load(Ordering::Relaxed),
        }
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

    /// Whether a member answers as part of a cluster with a leader, within `timeout`.
    pub async fn has_leader(&self, timeout: Duration) -> bool {
        let read = self.reading(|mut kv| async move {
            kv.get(COMPACT_KEY, Some(GetOptions::new().with_count_only()))
                .await
        });
        matches!(tokio::time::timeout(timeout, read).await, Ok(Ok(_)))
    }
}

/// Orders "3.4.23" below "3.5.0" below "3.10.1".
fn version_key(v: &str) -> Vec<u64> {
    v.trim_start_matches('v')
        .split(['.', '-', '+'])
        .map_while(|p| p.parse().ok())
        .collect()
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
