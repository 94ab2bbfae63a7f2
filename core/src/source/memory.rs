//! `MemorySource`: the embedded source of truth, an in-process MVCC store that behaves like
//! etcd for everything a cache relies on.
//!
//! One global revision, incremented by every write (starting at 1 for an empty store, as
//! etcd does); create, update and delete with optional optimistic concurrency on the mod
//! revision; a log of changes kept until compacted (explicitly, or by a retention window in
//! revisions and in bytes); reads at any retained revision; watches from any retained revision (inclusive,
//! as etcd's start revision) with the previous value of every change; progress notifications
//! on request and periodically. A fault switch makes it unavailable, for tests of the
//! reflector's recovery.

use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;
use tokio::sync::watch;

use super::{Source, SourceError, SourceEvent, SourceItem, SourceList};
use crate::loom::unpoisoned;
use crate::rv::Revision;

#[derive(Clone, Debug)]
struct Value {
    value: Bytes,
    modified: u64,
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
        value: Option<Bytes>,
        check: impl FnOnce(Option<&Value>) -> Result<(), SourceError>,
    ) -> Result<(Revision, Option<Bytes>), SourceError> {
        self.check_available()?;
        let mut state = self.mvcc();
        let prev = state.current.get(key).cloned();
        check(prev.as_ref())?;
        state.revision += 1;
        let revision = state.revision;
        match &value {
            Some(v) => {
                state.current.insert(
                    key.to_owned(),
                    Value {
                        value: v.clone(),
                        modified: revision,
                    },
                );
            }
            None => {
                state.current.remove(key);
            }
        }
        let prev_value = prev.as_ref().map(|p| p.value.clone());
        state.log_bytes += value.as_ref().map_or(0, Bytes::len);
        state.log.push_back(Change {
            revision,
            key: key.to_owned(),
            value,
            prev,
        });
        if let Some(keep) = self.inner.retention {
            let target = revision.saturating_sub(keep).max(state.compacted);
            compact_locked(&mut state, target);
        }
        if let Some(limit) = self.inner.retention_bytes {
            // The oldest changes go until the rest fit; the newest always stays.
            let mut bytes = state.log_bytes;
            let mut target = state.compacted;
            for c in state.log.iter().take(state.log.len().saturating_sub(1)) {
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
        Ok((Revision::new(revision), prev_value))
    }

    /// Creates `key`; `AlreadyExists` if it is present.
    pub fn create(&self, key: &str, value: Bytes) -> Result<Revision, SourceError> {
        self.write(key, Some(value), |prev| match prev {
            Some(_) => Err(SourceError::AlreadyExists(key.to_owned())),
            None => Ok(()),
        })
        .map(|(rev, _)| rev)
    }

    /// Updates `key`; `NotFound` if absent, `Conflict` if `expected` is given and is not its
    /// mod revision.
    pub fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
    ) -> Result<Revision, SourceError> {
        self.write(key, Some(value), |prev| check_expected(key, prev, expected))
            .map(|(rev, _)| rev)
    }

    /// Deletes `key` and returns the deletion's revision and the last value; `NotFound` if
    /// absent, `Conflict` if `expected` is given and is not its mod revision.
    pub fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(Revision, Bytes), SourceError> {
        self.write(key, None, |prev| check_expected(key, prev, expected))
            .map(|(rev, prev)| (rev, prev.unwrap_or_default()))
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
    /// Moves every change from `next` on under the prefix into `pending`.
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
        for c in state.log.range(start..) {
            if !c.key.starts_with(&self.prefix) {
                continue;
            }
            let prev = c.prev.as_ref().map(|p| p.value.clone());
            let mod_revision = Revision::new(c.revision);
            self.pending.push_back(match &c.value {
                Some(v) => SourceEvent::Put {
                    key: c.key.clone(),
                    value: v.clone(),
                    mod_revision,
                    prev,
                },
                None => SourceEvent::Delete {
                    key: c.key.clone(),
                    mod_revision,
                    prev,
                },
            });
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
        let ticker = self.inner.progress_interval.map(|d| {
            let mut t = tokio::time::interval_at(tokio::time::Instant::now() + d, d);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        let state = WatchState {
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
        };
        Ok(Box::pin(futures_util::stream::unfold(
            state,
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

    async fn request_progress(&self) -> Result<(), SourceError> {
        self.check_available()?;
        MemorySource::request_progress(self);
        Ok(())
    }

    fn compacted_revision(&self) -> Revision {
        MemorySource::compacted_revision(self)
    }

    /// From the change log: no change under `prefix` in `(since, at]` (a stronger fact than
    /// the trait asks, and as cheap here).
    async fn unchanged_since(
        &self,
        prefix: &str,
        since: Revision,
        at: Revision,
        _count: usize,
    ) -> Result<bool, SourceError> {
        self.check_available()?;
        let state = self.mvcc();
        if since.get() < state.compacted || at.get() > state.revision {
            return Ok(false);
        }
        let from = state.log.partition_point(|c| c.revision <= since.get());
        Ok(!state
            .log
            .range(from..)
            .take_while(|c| c.revision <= at.get())
            .any(|c| c.key.starts_with(prefix)))
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
    async fn a_watch_replays_from_its_start_revision_then_follows_live_writes() {
        let s = MemorySource::new();
        let r1 = s.create("p/a", b("a1")).unwrap();
        let r2 = s.update("p/a", b("a2"), None).unwrap();
        let mut w = s.watch("p/", r2).await.unwrap();
        assert_eq!(
            w.next().await.unwrap().unwrap(),
            SourceEvent::Put {
                key: "p/a".into(),
                value: b("a2"),
                mod_revision: r2,
                prev: Some(b("a1"))
            }
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
            SourceEvent::Delete {
                key: "p/a".into(),
                mod_revision: r4,
                prev: Some(b("a2"))
            }
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
}
