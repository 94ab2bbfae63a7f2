//! `MemorySource`: the embedded source of truth, an in-process MVCC store that behaves like
//! etcd for everything a cache relies on.
//!
//! One global revision, incremented by every write (starting at 1 for an empty store, as
//! etcd does); create, update and delete with optional optimistic concurrency on the mod
//! revision; writes that change several keys at one revision, as etcd's do (a transaction, a
//! prefix delete, a lease's expiry or revocation: [`MemorySource::txn`],
//! [`MemorySource::delete_prefix`], leases with a time to live); a log of changes kept until compacted (explicitly, or by a retention window in
//! revisions and in bytes); reads at any retained revision; watches from any retained revision (inclusive,
//! as etcd's start revision) with the previous value of every change; progress notifications
//! on request and periodically. A fault switch makes it unavailable, for tests of the
//! reflector's recovery.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;
use tokio::sync::watch;

use super::{PrevValue, Source, SourceChange, SourceError, SourceEvent, SourceItem, SourceList};
use crate::loom::unpoisoned;
use crate::rv::Revision;

#[derive(Clone, Debug)]
struct Value {
    value: Bytes,
    modified: u64,
    /// The lease the key is attached to: it goes when the lease expires or is revoked.
    lease: Option<LeaseId>,
}

/// A lease: keys attached to it are deleted together, at one revision, when it expires (its
/// time to live passed) or is revoked, as etcd's leases are.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(pub u64);

#[derive(Debug)]
struct Lease {
    deadline: tokio::time::Instant,
    keys: BTreeSet<String>,
}

/// A key and what a write leaves there: a value (attached to a lease, or not), or nothing.
type Write = (String, Option<(Bytes, Option<LeaseId>)>);

/// One write of a transaction ([`MemorySource::txn`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnWrite {
    /// Creates or replaces the key's value (detaching it from any lease).
    Put {
        /// The key.
        key: String,
        /// The value.
        value: Bytes,
    },
    /// Deletes the key, if present.
    Delete {
        /// The key.
        key: String,
    },
}

#[derive(Clone, Debug)]
struct Change {
    revision: u64,
    key: String,
    /// `None` for a deletion.
    value: Option<Bytes>,
    prev: Option<Value>,
}

/// The MVCC data behind the lock: the current values, the change log and the revisions.
#[derive(Debug)]
struct Mvcc {
    revision: u64,
    /// Reads and watches need a revision at or above this; older changes are gone.
    compacted: u64,
    current: BTreeMap<String, Value>,
    /// Changes with revisions from `compacted` on, in revision order.
    log: VecDeque<Change>,
    /// The bytes of the values the log holds (each value is counted once, by the change that
    /// wrote it; a later change's `prev` shares it).
    log_bytes: usize,
    leases: HashMap<LeaseId, Lease>,
    next_lease: u64,
}

#[derive(Debug)]
struct Inner {
    mvcc: Mutex<Mvcc>,
    /// The current revision; every write (and every availability change) notifies watches.
    revision: watch::Sender<u64>,
    /// Bumped by `request_progress`: every watch answers with a progress notification.
    progress: watch::Sender<u64>,
    available: AtomicBool,
    watches_paused: AtomicBool,
    progress_interval: Option<Duration>,
    retention: Option<u64>,
    /// The most bytes of values the log may hold; the oldest changes are compacted beyond it.
    retention_bytes: Option<usize>,
    /// The continue-token signing key, made with the store.
    signing_key: [u8; 16],
}

/// The embedded MVCC store; see the module docs. Cheap to clone (a handle).
///
/// ```
/// use bytes::Bytes;
/// use watchcache_core::{MemorySource, Revision, SourceError};
///
/// let store = MemorySource::new();
/// let rev = store.create("pods/default/a", Bytes::from_static(b"v1"))?;
/// assert_eq!(rev, Revision::new(2));
/// let stale = store.update("pods/default/a", Bytes::from_static(b"v2"), Some(Revision::new(1)));
/// assert!(matches!(stale, Err(SourceError::Conflict { .. })));
/// store.update("pods/default/a", Bytes::from_static(b"v2"), Some(rev))?;
/// assert_eq!(store.get("pods/default/a").unwrap().0, Bytes::from_static(b"v2"));
/// # Ok::<(), SourceError>(())
/// ```
#[derive(Clone, Debug)]
pub struct MemorySource {
    inner: Arc<Inner>,
}

impl Default for MemorySource {
    fn default() -> Self {
        MemorySource::new()
    }
}

impl MemorySource {
    /// An empty store at revision 1, keeping all history until compacted.
    pub fn new() -> Self {
        MemorySource::with_options(None, None)
    }

    /// An empty store that sends progress notifications on every watch every
    /// `progress_interval`, and compacts to keep only the last `retention` revisions.
    pub fn with_options(progress_interval: Option<Duration>, retention: Option<u64>) -> Self {
        MemorySource::with_limits(progress_interval, retention, None)
    }

    /// As [`with_options`](Self::with_options), and also compacts so that the log's values
    /// take at most `retention_bytes` (the newest change is always kept).
    pub fn with_limits(
        progress_interval: Option<Duration>,
        retention: Option<u64>,
        retention_bytes: Option<usize>,
    ) -> Self {
        let mvcc = Mvcc {
            revision: 1,
            compacted: 1,
            current: BTreeMap::new(),
            log: VecDeque::new(),
            log_bytes: 0,
            leases: HashMap::new(),
            next_lease: 1,
        };
        MemorySource {
            inner: Arc::new(Inner {
                mvcc: Mutex::new(mvcc),
                revision: watch::channel(1).0,
                progress: watch::channel(0).0,
                available: AtomicBool::new(true),
                watches_paused: AtomicBool::new(false),
                progress_interval,
                retention,
                retention_bytes,
                signing_key: random_key(),
            }),
        }
    }

    fn mvcc(&self) -> MutexGuard<'_, Mvcc> {
        // No critical section below can leave `Mvcc` half-updated on panic.
        unpoisoned(self.inner.mvcc.lock())
    }

    fn check_available(&self) -> Result<(), SourceError> {
        if self.inner.available.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(SourceError::Unavailable(
                "the memory source is switched off".into(),
            ))
        }
    }

    fn check_watchable(&self) -> Result<(), SourceError> {
        self.check_available()?;
        if self.inner.watches_paused.load(Ordering::Acquire) {
            Err(SourceError::Unavailable("watches are paused".into()))
        } else {
            Ok(())
        }
    }

    /// Applies one write under the lock and notifies watches.
    fn write(
        &self,
        key: &str,
        value: Option<(Bytes, Option<LeaseId>)>,
        check: impl FnOnce(Option<&Value>) -> Result<(), SourceError>,
    ) -> Result<(Revision, Option<Bytes>), SourceError> {
        self.check_available()?;
        let state = self.mvcc();
        let prev = state.current.get(key).map(|p| p.value.clone());
        check(state.current.get(key))?;
        if let Some((_, Some(lease))) = &value
            && !state.leases.contains_key(lease)
        {
            return Err(SourceError::NotFound(format!("lease {}", lease.0)));
        }
        let revision = self.commit(state, vec![(key.to_owned(), value)]);
        Ok((revision.unwrap_or_else(|| self.revision()), prev))
    }

    /// Applies `writes` (each key at most once; `None` deletes) at one new revision, under the
    /// lock `state` holds, then compacts what retention asks and notifies watches. Deletions of
    /// absent keys change nothing; when nothing changes, the revision stays (as etcd's does)
    /// and `None` is returned.
    fn commit(&self, mut state: MutexGuard<'_, Mvcc>, writes: Vec<Write>) -> Option<Revision> {
        let revision = state.revision + 1;
        let mut changed = false;
        for (key, value) in writes {
            let prev = match &value {
                Some((v, lease)) => state.current.insert(
                    key.clone(),
                    Value {
                        value: v.clone(),
                        modified: revision,
                        lease: *lease,
                    },
                ),
                None => state.current.remove(&key),
            };
            if value.is_none() && prev.is_none() {
                continue;
            }
            changed = true;
            let old_lease = prev.as_ref().and_then(|p| p.lease);
            let new_lease = value.as_ref().and_then(|(_, l)| *l);
            if old_lease != new_lease {
                if let Some(l) = old_lease.and_then(|l| state.leases.get_mut(&l)) {
                    l.keys.remove(&key);
                }
                if let Some(l) = new_lease.and_then(|l| state.leases.get_mut(&l)) {
                    l.keys.insert(key.clone());
                }
            }
            let value = value.map(|(v, _)| v);
            state.log_bytes += value.as_ref().map_or(0, Bytes::len);
            state.log.push_back(Change {
                revision,
                key,
                value,
                prev,
            });
        }
        if !changed {
            return None;
        }
        state.revision = revision;
        if let Some(keep) = self.inner.retention {
            let target = revision.saturating_sub(keep).max(state.compacted);
            compact_locked(&mut state, target);
        }
        if let Some(limit) = self.inner.retention_bytes {
            // The oldest revisions go until the rest fit; the newest always stays, whole.
            let mut bytes = state.log_bytes;
            let mut target = state.compacted;
            for c in state.log.iter().take_while(|c| c.revision < revision) {
                if bytes <= limit {
                    break;
                }
                bytes -= change_bytes(c);
                target = c.revision + 1;
            }
            compact_locked(&mut state, target);
        }
        drop(state);
        self.inner.revision.send_replace(revision);
        Some(Revision::new(revision))
    }

    /// Creates `key`; `AlreadyExists` if it is present.
    pub fn create(&self, key: &str, value: Bytes) -> Result<Revision, SourceError> {
        self.create_with_lease(key, value, None)
    }

    /// Creates `key`, attached to `lease` when given (it goes with the lease); `AlreadyExists`
    /// if it is present, `NotFound` if the lease is not (expired or revoked).
    pub fn create_with_lease(
        &self,
        key: &str,
        value: Bytes,
        lease: Option<LeaseId>,
    ) -> Result<Revision, SourceError> {
        self.write(key, Some((value, lease)), |prev| match prev {
            Some(_) => Err(SourceError::AlreadyExists(key.to_owned())),
            None => Ok(()),
        })
        .map(|(rev, _)| rev)
    }

    /// Updates `key`; `NotFound` if absent, `Conflict` if `expected` is given and is not its
    /// mod revision. The key leaves any lease it was attached to.
    pub fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
    ) -> Result<Revision, SourceError> {
        self.update_with_lease(key, value, expected, None)
    }

    /// Updates `key` as [`update`](Self::update) does, attached to `lease` when given.
    pub fn update_with_lease(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
        lease: Option<LeaseId>,
    ) -> Result<Revision, SourceError> {
        self.write(key, Some((value, lease)), |prev| {
            check_expected(key, prev, expected)
        })
        .map(|(rev, _)| rev)
    }

    /// Deletes `key` and returns the deletion's revision and the last value; `NotFound` if
    /// absent, `Conflict` if `expected` is given and is not its mod revision.
    pub fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(Revision, Bytes), SourceError> {
        self.write(key, None, |prev| check_expected(key, prev, expected))
            .map(|(rev, prev)| (rev, prev.unwrap_or_default()))
    }

    /// Applies every write of `writes` at one revision, as an etcd transaction does: a watch
    /// sees all of them at that revision, together. Each key may appear once (`AlreadyExists`
    /// names one that appears twice). Returns the revision, or the current one when nothing
    /// changed (only deletions of absent keys).
    pub fn txn(&self, writes: Vec<TxnWrite>) -> Result<Revision, SourceError> {
        self.check_available()?;
        let mut seen = BTreeSet::new();
        let mut batch = Vec::with_capacity(writes.len());
        for w in writes {
            let (key, value) = match w {
                TxnWrite::Put { key, value } => (key, Some((value, None))),
                TxnWrite::Delete { key } => (key, None),
            };
            if !seen.insert(key.clone()) {
                return Err(SourceError::AlreadyExists(format!(
                    "{key} (twice in one transaction)"
                )));
            }
            batch.push((key, value));
        }
        let state = self.mvcc();
        let current = Revision::new(state.revision);
        Ok(self.commit(state, batch).unwrap_or(current))
    }

    /// Deletes every key under `prefix` at one revision, as etcd's range delete does; returns
    /// the revision (the current one when there was nothing to delete) and how many keys went.
    pub fn delete_prefix(&self, prefix: &str) -> Result<(Revision, usize), SourceError> {
        self.check_available()?;
        let state = self.mvcc();
        let batch: Vec<_> = state
            .current
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| (k.clone(), None))
            .collect();
        let current = Revision::new(state.revision);
        let n = batch.len();
        Ok((self.commit(state, batch).unwrap_or(current), n))
    }

    /// Grants a lease that expires `ttl` from now (see [`expire_leases`](Self::expire_leases)).
    pub fn grant_lease(&self, ttl: Duration) -> Result<LeaseId, SourceError> {
        self.check_available()?;
        let mut state = self.mvcc();
        let id = LeaseId(state.next_lease);
        state.next_lease += 1;
        let deadline = tokio::time::Instant::now() + ttl.min(Duration::from_secs(10 * 365 * 24 * 3600));
        state.leases.insert(
            id,
            Lease {
                deadline,
                keys: BTreeSet::new(),
            },
        );
        Ok(id)
    }

    /// Revokes `lease`: every key attached to it is deleted, all at one revision (returned;
    /// `None` when it held no key). `NotFound` when there is no such lease.
    pub fn revoke_lease(&self, lease: LeaseId) -> Result<Option<Revision>, SourceError> {
        self.check_available()?;
        let mut state = self.mvcc();
        let Some(l) = state.leases.remove(&lease) else {
            return Err(SourceError::NotFound(format!("lease {}", lease.0)));
        };
        let batch = l.keys.into_iter().map(|k| (k, None)).collect();
        Ok(self.commit(state, batch))
    }

    /// Revokes every lease whose time to live has passed (each at a revision of its own, as
    /// etcd expires them); returns how many expired. [`keep_leases`](Self::keep_leases) calls
    /// it when the next one is due.
    pub fn expire_leases(&self) -> usize {
        let now = tokio::time::Instant::now();
        let due: Vec<LeaseId> = {
            let state = self.mvcc();
            let mut due: Vec<_> = state
                .leases
                .iter()
                .filter(|(_, l)| l.deadline <= now)
                .map(|(id, _)| *id)
                .collect();
            due.sort();
            due
        };
        due.into_iter()
            .filter(|id| self.revoke_lease(*id).is_ok())
            .count()
    }

    /// Expires leases as they come due, until the future is dropped (the server runs it).
    pub async fn keep_leases(self) {
        loop {
            let next = self.mvcc().leases.values().map(|l| l.deadline).min();
            let at = next.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(1));
            // Wakes at least every second: a lease granted meanwhile may be due sooner.
            let at = at.min(tokio::time::Instant::now() + Duration::from_secs(1));
            tokio::time::sleep_until(at).await;
            self.expire_leases();
        }
    }

    /// The current value of `key` and its mod revision.
    pub fn get(&self, key: &str) -> Option<(Bytes, Revision)> {
        self.mvcc()
            .current
            .get(key)
            .map(|v| (v.value.clone(), Revision::new(v.modified)))
    }

    /// The current revision, synchronously.
    pub fn revision(&self) -> Revision {
        Revision::new(self.mvcc().revision)
    }

    /// Forgets history before `revision` (capped at the current revision): reads and watches
    /// at older revisions fail with `Compacted`, and watches already behind it are cancelled.
    pub fn compact(&self, revision: Revision) {
        let mut state = self.mvcc();
        let target = revision.get().min(state.revision);
        compact_locked(&mut state, target);
        drop(state);
        // Wake watches so those now behind the compaction fail at once.
        self.inner.revision.send_modify(|_| {});
    }

    /// A watch's state from revision `from` on (its log position, its notifications).
    fn watch_state(&self, prefix: &str, from: Revision) -> WatchState {
        let ticker = self.inner.progress_interval.map(|d| {
            let mut t = tokio::time::interval_at(tokio::time::Instant::now() + d, d);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        WatchState {
            source: self.clone(),
            prefix: prefix.to_owned(),
            next: from.get().max(1),
            revision: self.inner.revision.subscribe(),
            progress: {
                let mut rx = self.inner.progress.subscribe();
                rx.borrow_and_update();
                rx
            },
            ticker,
            pending: VecDeque::new(),
            ended: false,
        }
    }

    /// The oldest revision still readable.
    pub fn compacted_revision(&self) -> Revision {
        Revision::new(self.mvcc().compacted)
    }

    /// Asks every watch for a progress notification at the current revision.
    pub fn request_progress(&self) {
        self.inner.progress.send_modify(|n| *n += 1);
    }

    /// Pauses watches: while paused, open watches end with `Unavailable` and new ones are
    /// refused, but reads and writes go on (a partitioned watcher, for tests).
    pub fn pause_watches(&self, paused: bool) {
        self.inner.watches_paused.store(paused, Ordering::Release);
        self.inner.revision.send_modify(|_| {});
    }

    /// Switches the store on or off. Off, every call fails with `Unavailable` and every open
    /// watch ends with it.
    pub fn set_available(&self, available: bool) {
        self.inner.available.store(available, Ordering::Release);
        self.inner.revision.send_modify(|_| {});
    }
}

/// A key from the operating system's randomness: a signing key must not be guessable from
/// anything else the process shows. Without one (no entropy source at all) the store still
/// works, its tokens then only as unguessable as the time it was made.
fn random_key() -> [u8; 16] {
    let mut key = [0u8; 16];
    if getrandom::fill(&mut key).is_err() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        key = now.as_nanos().to_le_bytes();
    }
    key
}

fn check_expected(key: &str, prev: Option<&Value>, expected: Option<Revision>) -> Result<(), SourceError> {
    match (prev, expected) {
        (None, _) => Err(SourceError::NotFound(key.to_owned())),
        (Some(p), Some(e)) if p.modified != e.get() => Err(SourceError::Conflict {
            key: key.to_owned(),
            current: Revision::new(p.modified),
        }),
        _ => Ok(()),
    }
}

fn compact_locked(state: &mut Mvcc, target: u64) {
    if target <= state.compacted {
        return;
    }
    state.compacted = target;
    let keep_from = state.log.partition_point(|c| c.revision < target);
    let dropped: usize = state.log.drain(..keep_from).map(|c| change_bytes(&c)).sum();
    state.log_bytes -= dropped;
}

/// The bytes a change's own value takes in the log.
fn change_bytes(c: &Change) -> usize {
    c.value.as_ref().map_or(0, Bytes::len)
}

/// How many changes a watch takes from the log at once (a revision's are never split).
const COLLECT_BATCH: usize = if cfg!(miri) { 16 } else { 256 };

/// The stream [`MemorySource::watch`] returns.
pub type MemoryWatch = Pin<Box<dyn Stream<Item = Result<SourceEvent, SourceError>> + Send>>;

struct WatchState {
    source: MemorySource,
    prefix: String,
    next: u64,
    revision: watch::Receiver<u64>,
    progress: watch::Receiver<u64>,
    ticker: Option<tokio::time::Interval>,
    pending: VecDeque<SourceEvent>,
    ended: bool,
}

impl WatchState {
    /// Moves the changes from `next` on under the prefix into `pending`: at most about
    /// [`COLLECT_BATCH`] of them (whole revisions), so that a watch from an old revision (a
    /// catch-up) holds a batch of the log at a time, not the whole retained history, and the
    /// lock is held for one batch.
    fn collect(&mut self) -> Result<(), SourceError> {
        self.source.check_watchable()?;
        // Mark the revision seen before reading, so a write after the read notifies us.
        self.revision.borrow_and_update();
        let state = self.source.mvcc();
        if self.next < state.compacted {
            return Err(SourceError::Compacted {
                compact_revision: Revision::new(state.compacted),
            });
        }
        let start = state.log.partition_point(|c| c.revision < self.next);
        let mut taken = 0;
        for c in state.log.range(start..) {
            if !c.key.starts_with(&self.prefix) {
                continue;
            }
            if taken >= COLLECT_BATCH
                && self
                    .pending
                    .back()
                    .is_some_and(|e| e.revision().get() != c.revision)
            {
                // A full batch, ending with a whole revision: the next collect starts here.
                self.next = c.revision;
                return Ok(());
            }
            taken += 1;
            let prev = c.prev.as_ref().map(|p| PrevValue {
                value: p.value.clone(),
                mod_revision: Revision::new(p.modified),
            });
            let change = match &c.value {
                Some(v) => SourceChange::Put {
                    key: c.key.clone(),
                    value: v.clone(),
                    created: prev.is_none(),
                    prev,
                },
                None => SourceChange::Delete {
                    key: c.key.clone(),
                    prev,
                },
            };
            let revision = Revision::new(c.revision);
            // The log holds a revision's changes together: they go out as one event.
            match self.pending.back_mut() {
                Some(SourceEvent::Changes { revision: r, changes }) if *r == revision => changes.push(change),
                _ => self.pending.push_back(SourceEvent::single(revision, change)),
            }
        }
        self.next = self.next.max(state.revision + 1);
        Ok(())
    }

    async fn next_event(&mut self) -> Option<Result<SourceEvent, SourceError>> {
        loop {
            if self.ended {
                return None;
            }
            if let Some(e) = self.pending.pop_front() {
                return Some(Ok(e));
            }
            if let Err(e) = self.collect() {
                self.ended = true;
                return Some(Err(e));
            }
            if !self.pending.is_empty() {
                continue;
            }
            let progress = tokio::select! {
                changed = self.revision.changed() => {
                    if changed.is_err() {
                        self.ended = true;
                    }
                    false
                }
                _ = self.progress.changed() => true,
                _ = tick(&mut self.ticker) => true,
            };
            if progress && self.source.check_available().is_ok() {
                // Everything up to `next - 1` has been delivered: report it (after a last
                // look, so a progress notification never overtakes a change).
                if let Err(e) = self.collect() {
                    self.ended = true;
                    return Some(Err(e));
                }
                let revision = Revision::new(self.next - 1);
                self.pending.push_back(SourceEvent::Progress { revision });
            }
        }
    }
}

async fn tick(ticker: &mut Option<tokio::time::Interval>) {
    match ticker {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

impl Source for MemorySource {
    type Watch = MemoryWatch;

    async fn list(&self, prefix: &str, at: Option<Revision>) -> Result<SourceList, SourceError> {
        self.check_available()?;
        let state = self.mvcc();
        let at = at.map_or(state.revision, Revision::get);
        if at < state.compacted {
            return Err(SourceError::Compacted {
                compact_revision: Revision::new(state.compacted),
            });
        }
        if at > state.revision {
            return Err(SourceError::Unavailable(format!(
                "revision {at} is in the future (current {})",
                state.revision
            )));
        }
        let mut view: BTreeMap<&str, &Value> = state
            .current
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.as_str(), v))
            .collect();
        // Undo the changes after `at`, newest first.
        let after = state.log.partition_point(|c| c.revision <= at);
        for c in state.log.range(after..).rev() {
            if !c.key.starts_with(prefix) {
                continue;
            }
            match &c.prev {
                Some(p) => view.insert(c.key.as_str(), p),
                None => view.remove(c.key.as_str()),
            };
        }
        let items = view
            .into_iter()
            .map(|(k, v)| SourceItem {
                key: k.to_owned(),
                value: v.value.clone(),
                mod_revision: Revision::new(v.modified),
            })
            .collect();
        Ok(SourceList {
            items,
            revision: Revision::new(at),
        })
    }

    async fn watch(&self, prefix: &str, from: Revision) -> Result<Self::Watch, SourceError> {
        self.check_watchable()?;
        {
            let state = self.mvcc();
            if from.get() < state.compacted {
                return Err(SourceError::Compacted {
                    compact_revision: Revision::new(state.compacted),
                });
            }
        }
        Ok(Box::pin(futures_util::stream::unfold(
            self.watch_state(prefix, from),
            |mut s| async move {
                let item = s.next_event().await?;
                Some((item, s))
            },
        )))
    }

    async fn current_revision(&self) -> Result<Revision, SourceError> {
        self.check_available()?;
        Ok(self.revision())
    }

    async fn signing_key(&self) -> Result<[u8; 16], SourceError> {
        self.check_available()?;
        Ok(self.inner.signing_key)
    }

    /// Every watch answers (a notification to a watch of another prefix costs it nothing).
    async fn request_progress(&self, _prefix: &str) -> Result<(), SourceError> {
        self.check_available()?;
        MemorySource::request_progress(self);
        Ok(())
    }

    fn compacted_revision(&self) -> Revision {
        MemorySource::compacted_revision(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    fn b(s: &'static str) -> Bytes {
        Bytes::from_static(s.as_bytes())
    }

    #[tokio::test]
    async fn lists_at_any_retained_revision_and_refuses_compacted_ones() {
        let s = MemorySource::new();
        let r1 = s.create("p/a", b("a1")).unwrap();
        let r2 = s.create("p/b", b("b1")).unwrap();
        let r3 = s.update("p/a", b("a2"), None).unwrap();
        let (r4, prev) = s.delete("p/b", Some(r2)).unwrap();
        assert_eq!(prev, b("b1"));
        s.create("q/z", b("other prefix")).unwrap();
        let at = |rev: Revision| {
            let s = s.clone();
            async move {
                let l = s.list("p/", Some(rev)).await.unwrap();
                l.items
                    .into_iter()
                    .map(|i| (i.key, i.value, i.mod_revision.get()))
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(at(r1).await, vec![("p/a".into(), b("a1"), r1.get())]);
        assert_eq!(
            at(r2).await,
            vec![
                ("p/a".into(), b("a1"), r1.get()),
                ("p/b".into(), b("b1"), r2.get())
            ]
        );
        assert_eq!(
            at(r3).await,
            vec![
                ("p/a".into(), b("a2"), r3.get()),
                ("p/b".into(), b("b1"), r2.get())
            ]
        );
        assert_eq!(at(r4).await, vec![("p/a".into(), b("a2"), r3.get())]);
        assert_eq!(s.list("p/", None).await.unwrap().revision, Revision::new(6));
        s.compact(r3);
        assert_eq!(
            s.list("p/", Some(r2)).await.unwrap_err(),
            SourceError::Compacted { compact_revision: r3 }
        );
        assert_eq!(
            at(r3).await.len(),
            2,
            "the compaction revision itself stays readable"
        );
        assert!(matches!(
            s.list("p/", Some(Revision::new(99))).await,
            Err(SourceError::Unavailable(_))
        ));
    }

    #[tokio::test]
    async fn writes_check_existence_and_expected_revisions() {
        let s = MemorySource::new();
        let r = s.create("k", b("1")).unwrap();
        assert_eq!(s.create("k", b("2")), Err(SourceError::AlreadyExists("k".into())));
        assert_eq!(
            s.update("nope", b("2"), None),
            Err(SourceError::NotFound("nope".into()))
        );
        assert_eq!(
            s.update("k", b("2"), Some(Revision::new(1))),
            Err(SourceError::Conflict {
                key: "k".into(),
                current: r
            })
        );
        assert_eq!(s.delete("nope", None), Err(SourceError::NotFound("nope".into())));
        assert_eq!(s.revision(), r, "refused writes do not move the revision");
    }

    #[tokio::test]
    async fn a_watch_from_an_old_revision_takes_the_log_in_batches_of_whole_revisions() {
        let s = MemorySource::new();
        // A run of single writes, a transaction and another run: each a batch and a bit.
        let n = COLLECT_BATCH + COLLECT_BATCH / 2;
        for i in 0..n {
            s.create(&format!("p/a{i:03}"), b("v")).unwrap();
        }
        // One revision larger than a batch, in the middle of the history.
        let writes = (0..n)
            .map(|i| TxnWrite::Put {
                key: format!("p/t{i:03}"),
                value: b("v"),
            })
            .collect();
        let txn = s.txn(writes).unwrap();
        for i in 0..n {
            s.create(&format!("p/z{i:03}"), b("v")).unwrap();
        }
        let mut w = s.watch("p/", Revision::new(1)).await.unwrap();
        let (mut changes, mut last) = (0, Revision::ZERO);
        while changes < 3 * n {
            match w.next().await.unwrap().unwrap() {
                SourceEvent::Changes { revision, changes: c } => {
                    assert!(revision > last, "revisions in order, each once");
                    if revision == txn {
                        assert_eq!(c.len(), n, "the transaction whole");
                    }
                    (changes, last) = (changes + c.len(), revision);
                }
                SourceEvent::Progress { .. } => {}
            }
        }
        assert_eq!(last, s.revision());
        // One look at the log takes a batch, ending with a whole revision: here the first batch
        // of creates, then the other half batch with the whole transaction.
        let mut state = s.watch_state("p/", Revision::new(1));
        let taken = |state: &WatchState| {
            state
                .pending
                .iter()
                .map(|e| match e {
                    SourceEvent::Changes { changes, .. } => changes.len(),
                    SourceEvent::Progress { .. } => 0,
                })
                .sum::<usize>()
        };
        state.collect().unwrap();
        assert_eq!(taken(&state), COLLECT_BATCH);
        state.pending.clear();
        state.collect().unwrap();
        assert_eq!(taken(&state), COLLECT_BATCH / 2 + n);
    }

    #[tokio::test]
    async fn a_watch_replays_from_its_start_revision_then_follows_live_writes() {
        let s = MemorySource::new();
        let r1 = s.create("p/a", b("a1")).unwrap();
        let r2 = s.update("p/a", b("a2"), None).unwrap();
        let mut w = s.watch("p/", r2).await.unwrap();
        assert_eq!(
            w.next().await.unwrap().unwrap(),
            SourceEvent::single(
                r2,
                SourceChange::Put {
                    key: "p/a".into(),
                    value: b("a2"),
                    prev: Some(PrevValue {
                        value: b("a1"),
                        mod_revision: r1
                    }),
                    created: false,
                }
            )
        );
        let writer = s.clone();
        let h = tokio::spawn(async move {
            tokio::task::yield_now().await;
            writer.create("q/x", b("ignored")).unwrap();
            writer.delete("p/a", None).unwrap().0
        });
        let r4 = h.await.unwrap();
        assert_eq!(
            w.next().await.unwrap().unwrap(),
            SourceEvent::single(
                r4,
                SourceChange::Delete {
                    key: "p/a".into(),
                    prev: Some(PrevValue {
                        value: b("a2"),
                        mod_revision: r2
                    })
                }
            )
        );
        assert!(r1 < r2);
    }

    #[tokio::test]
    async fn progress_is_sent_on_request_and_a_compaction_cancels_a_watch_behind_it() {
        let s = MemorySource::new();
        let mut w = s.watch("p/", Revision::new(1)).await.unwrap();
        s.create("other/x", b("x")).unwrap();
        s.request_progress();
        assert_eq!(
            w.next().await.unwrap().unwrap(),
            SourceEvent::Progress {
                revision: Revision::new(2)
            }
        );
        let mut behind = s.watch("p/", Revision::new(2)).await.unwrap();
        s.create("p/a", b("a")).unwrap();
        s.create("p/b", b("b")).unwrap();
        s.compact(Revision::new(4));
        assert_eq!(
            behind.next().await.unwrap(),
            Err(SourceError::Compacted {
                compact_revision: Revision::new(4)
            })
        );
        assert!(behind.next().await.is_none());
        assert!(matches!(
            s.watch("p/", Revision::new(3)).await,
            Err(SourceError::Compacted { .. })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn progress_is_sent_periodically_when_asked_to() {
        let s = MemorySource::with_options(Some(Duration::from_secs(5)), None);
        let mut w = s.watch("p/", Revision::new(1)).await.unwrap();
        let e = tokio::time::timeout(Duration::from_secs(6), w.next())
            .await
            .unwrap();
        assert_eq!(
            e.unwrap().unwrap(),
            SourceEvent::Progress {
                revision: Revision::new(1)
            }
        );
    }

    #[test]
    fn retention_in_bytes_compacts_the_oldest_changes_but_never_the_newest() {
        let s = MemorySource::with_limits(None, None, Some(2500));
        let big = Bytes::from(vec![b'x'; 1000]);
        let mut last = Revision::ZERO;
        for i in 0..10 {
            last = s.create(&format!("p/{i}"), big.clone()).unwrap();
        }
        // Two values of 1000 bytes fit in 2500: the log keeps the last two changes.
        assert_eq!(s.compacted_revision(), Revision::new(last.get() - 1));
        let huge = Bytes::from(vec![b'y'; 5000]);
        let newest = s.update("p/0", huge, None).unwrap();
        assert_eq!(s.compacted_revision(), newest, "the newest change stays, alone");
        assert_eq!(
            s.get("p/9").map(|(v, _)| v.len()),
            Some(1000),
            "the data is all there"
        );
    }

    #[tokio::test]
    async fn retention_compacts_automatically_and_switching_off_ends_watches() {
        let s = MemorySource::with_options(None, Some(3));
        for i in 0..10 {
            s.create(&format!("p/{i}"), b("v")).unwrap();
        }
        assert_eq!(s.compacted_revision(), Revision::new(8));
        let mut w = s.watch("p/", Revision::new(11)).await.unwrap();
        s.set_available(false);
        assert!(matches!(
            w.next().await.unwrap(),
            Err(SourceError::Unavailable(_))
        ));
        assert!(matches!(
            s.list("p/", None).await,
            Err(SourceError::Unavailable(_))
        ));
        s.set_available(true);
        assert_eq!(s.list("p/", None).await.unwrap().items.len(), 10);
    }

    /// The keys of one event of a watch, with their values (None for a deletion).
    fn changes(e: SourceEvent) -> (u64, Vec<(String, Option<Bytes>)>) {
        match e {
            SourceEvent::Changes { revision, changes } => (
                revision.get(),
                changes
                    .into_iter()
                    .map(|c| match c {
                        SourceChange::Put { key, value, .. } => (key, Some(value)),
                        SourceChange::Delete { key, .. } => (key, None),
                    })
                    .collect(),
            ),
            other => panic!("expected changes, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_transaction_and_a_prefix_delete_each_change_many_keys_at_one_revision() {
        let s = MemorySource::new();
        let mut w = s.watch("p/", Revision::new(2)).await.unwrap();
        let t = s
            .txn(vec![
                TxnWrite::Put {
                    key: "p/a".into(),
                    value: b("a"),
                },
                TxnWrite::Put {
                    key: "p/b".into(),
                    value: b("b"),
                },
                TxnWrite::Put {
                    key: "q/c".into(),
                    value: b("elsewhere"),
                },
            ])
            .unwrap();
        assert_eq!(t, Revision::new(2), "one revision for the whole transaction");
        assert_eq!(
            changes(w.next().await.unwrap().unwrap()),
            (
                2,
                vec![("p/a".into(), Some(b("a"))), ("p/b".into(), Some(b("b")))]
            ),
            "both keys of the prefix, in one event"
        );
        let (d, n) = s.delete_prefix("p/").unwrap();
        assert_eq!((d, n), (Revision::new(3), 2));
        assert_eq!(
            changes(w.next().await.unwrap().unwrap()),
            (3, vec![("p/a".into(), None), ("p/b".into(), None)])
        );
        assert_eq!(
            s.delete_prefix("p/").unwrap(),
            (d, 0),
            "nothing to delete moves nothing"
        );
        assert!(
            s.txn(vec![
                TxnWrite::Delete { key: "p/a".into() },
                TxnWrite::Delete { key: "p/a".into() }
            ])
            .is_err(),
            "a key twice in one transaction is refused"
        );
        let listed = s.list("p/", Some(Revision::new(2))).await.unwrap();
        assert_eq!(
            listed.items.len(),
            2,
            "a read at the transaction's revision sees all of it"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_takes_its_keys_with_it_at_one_revision_when_it_expires_or_is_revoked() {
        let s = MemorySource::new();
        let lease = s.grant_lease(Duration::from_secs(60)).unwrap();
        for name in ["e1", "e2", "e3"] {
            s.create_with_lease(&format!("ev/{name}"), b("x"), Some(lease))
                .unwrap();
        }
        s.create("ev/kept", b("no lease")).unwrap();
        // An update without the lease detaches the key, as etcd's put does.
        s.update("ev/e3", b("y"), None).unwrap();
        let mut w = s
            .watch("ev/", Revision::new(s.revision().get() + 1))
            .await
            .unwrap();
        assert_eq!(s.expire_leases(), 0, "not due yet");
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(s.expire_leases(), 1);
        assert_eq!(
            changes(w.next().await.unwrap().unwrap()).1,
            vec![("ev/e1".into(), None), ("ev/e2".into(), None)],
            "the lease's keys go together"
        );
        assert!(s.get("ev/e3").is_some() && s.get("ev/kept").is_some());
        assert!(matches!(
            s.create_with_lease("ev/e4", b("x"), Some(lease)),
            Err(SourceError::NotFound(_))
        ));
        let other = s.grant_lease(Duration::from_secs(60)).unwrap();
        s.create_with_lease("ev/e5", b("x"), Some(other)).unwrap();
        let revoked = s.revoke_lease(other).unwrap();
        assert_eq!(revoked, Some(s.revision()));
        assert!(s.get("ev/e5").is_none());
    }
}
