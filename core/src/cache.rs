//! The cache: one resource's current state and history, served with the apiserver's
//! resourceVersion semantics and kept up to date by its [reflector](crate::reflector).
//!
//! This file holds the handle, its construction and the waits every request starts with
//! (ready, fresh, consistent), as the apiserver's `cacher.go` orchestrates and `ready.go`
//! gates. The read path is [`read`](crate::read), the watch path [`watch`](crate::watch), the
//! state both read is the [`store`](crate::store).
//!
//! | request | served as |
//! |---|---|
//! | LIST, rv unset | consistent read: the source's current revision, then wait (bounded) until the cache has it |
//! | LIST, rv "0" | the current snapshot; `limit` and `continue` are honoured |
//! | LIST, rv N (NotOlderThan), no limit | wait until the cache is at N or later (bounded, else `TooLargeResourceVersion`), the newest snapshot |
//! | LIST, rv N, Exact, or a limit and no match | the retained snapshot at N, else `Expired` |
//! | LIST, a match without rv, or Exact with rv "0" | `InvalidRequest` |
//! | LIST with continue | the snapshot the token names, from the key after the token's key |
//! | WATCH, rv unset or "0" | ADDED for the current state (rv unset: after a consistent read), then live |
//! | WATCH, rv N | every event after N from the history window, then live; N older than the window is read from the source's history and handed over to the window (catch-up, see `catchup/`), `Expired` only once the source compacted past N (or without catch-up); N ahead of the cache starts at once |
//! | WATCH, sendInitialEvents=true | ADDED for the state, a bookmark marking the end of the initial events, then live |
//! | WATCH, sendInitialEvents=false | no initial events: live from rv (rv unset or "0": from now) |
//! | WATCH, bookmarks | a bookmark with the cache's revision once per `bookmark_interval` for each watcher that asked (the watchers are spread over the interval); progress notifications move that revision and wake no one |

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::catchup::{CacheUpstream, SharedReads, Upstream};
use crate::config::{BuildError, CacheConfig};
use crate::continue_token::Tokens;
use crate::object::{Codec, ObjectKey, ObjectVersion};
use crate::progress::Requester;
use crate::reflector;
use crate::rv::Revision;
use crate::selector::SelectorError;

use crate::snapshot::Snapshot;
use crate::source::{Source, SourceError, storage_key};
use crate::stats::CacheStats;
use crate::store::{Store, View};
use crate::watcher::Expired;

/// Why the cache could not serve a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheError {
    /// The requested revision is older than the history window (HTTP 410 `Expired`).
    Expired(Expired),
    /// The cache did not reach the requested revision in time (HTTP 504 with a
    /// `ResourceVersionTooLarge` cause and `retryAfterSeconds`).
    TooLargeResourceVersion {
        /// The requested revision.
        requested: Revision,
        /// The cache's revision.
        current: Revision,
    },
    /// The continue token is malformed, altered, or not for this resource (HTTP 400).
    InvalidContinue(String),
    /// The continue token is genuine but the snapshot it continues is no longer kept (HTTP 410
    /// `Expired`): the client lists again from the start.
    ContinueExpired(Expired),
    /// The parameters contradict each other (HTTP 400).
    InvalidRequest(String),
    /// A selector could not be parsed or names an unsupported field (HTTP 400).
    Selector(SelectorError),
    /// The cache has not completed its first list (HTTP 429 with `Retry-After`).
    NotReady {
        /// When to try again.
        retry_after: Duration,
    },
    /// The source failed a request the cache had to make (a consistent read's revision).
    Source(SourceError),
    /// The object a GET addresses is corrupt: its stored value does not decode (HTTP 500).
    CorruptObject(Corrupt),
    /// Objects a LIST (or a watch's initial events) would include are corrupt (HTTP 500
    /// `StorageReadError`, naming each): the read fails rather than skip them or serve what
    /// they were. At most [`MAX_CORRUPT_LISTED`] are named; `more` says others follow.
    CorruptObjects {
        /// The corrupt objects, in key order.
        objects: Vec<Corrupt>,
        /// Whether more than these are corrupt.
        more: bool,
    },
}

/// How many corrupt objects a failed LIST names.
pub const MAX_CORRUPT_LISTED: usize = 100;

/// A corrupt object a read met: its storage key, revision and why its value does not decode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Corrupt {
    /// The storage key.
    pub key: String,
    /// The revision of its value.
    pub revision: Revision,
    /// Why the value does not decode.
    pub reason: String,
}

impl Corrupt {
    /// The corruption of `object`, if it is a corrupt object.
    pub fn of(object: &ObjectVersion) -> Option<Corrupt> {
        object.corruption().map(|(key, reason)| Corrupt {
            key: key.to_owned(),
            revision: object.revision(),
            reason: reason.to_owned(),
        })
    }

    /// The read error for the corrupt objects `filter` selects in `snapshot`, if any.
    pub(crate) fn in_scope(snapshot: &Snapshot, filter: &crate::filter::Filter) -> Result<(), CacheError> {
        let mut found = snapshot.corrupt_matching(filter).filter_map(|o| Corrupt::of(o));
        let objects: Vec<Corrupt> = found.by_ref().take(MAX_CORRUPT_LISTED).collect();
        if objects.is_empty() {
            return Ok(());
        }
        let more = found.next().is_some();
        Err(CacheError::CorruptObjects { objects, more })
    }
}

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheError::Expired(e) => e.fmt(f),
            CacheError::TooLargeResourceVersion { requested, current } => {
                write!(f, "Too large resource version: {requested}, current: {current}")
            }
            CacheError::InvalidContinue(m) => write!(f, "invalid continue token: {m}"),
            CacheError::ContinueExpired(_) => f.write_str(
                "The provided continue parameter is too old to display a consistent list result. \
                 You can start a new list without the continue parameter.",
            ),
            CacheError::InvalidRequest(m) => f.write_str(m),
            CacheError::Selector(e) => e.fmt(f),
            CacheError::NotReady { .. } => f.write_str("the watch cache is not initialized yet"),
            CacheError::Source(e) => e.fmt(f),
            CacheError::CorruptObject(c) => write!(f, "corrupt object at {}: {}", c.key, c.reason),
            CacheError::CorruptObjects { objects, more } => write!(
                f,
                "{}{} corrupt objects: {}",
                objects.len(),
                if *more { "+" } else { "" },
                objects
                    .iter()
                    .map(|c| c.key.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

impl std::error::Error for CacheError {}

impl From<Expired> for CacheError {
    fn from(e: Expired) -> Self {
        CacheError::Expired(e)
    }
}

impl From<SelectorError> for CacheError {
    fn from(e: SelectorError) -> Self {
        CacheError::Selector(e)
    }
}

/// How long a read waits for a cache whose source cannot order progress notifications before
/// it reads from the source instead: enough for the watch to bring a write just made.
const UNORDERED_WAIT: Duration = Duration::from_millis(100);

/// The state a read is served from: the current view (its hub serves the live part of a
/// watch), and the snapshot and revision of the answer: the view's own, or one read from the
/// source when the cache could not prove it had reached the revision the read needs.
pub(crate) struct Basis {
    pub(crate) view: Arc<View>,
    pub(crate) snapshot: Arc<Snapshot>,
    pub(crate) revision: Revision,
    /// The snapshot was read from the source: it shares nothing with the cache's, so a LIST
    /// does not keep it for its next pages (those read the source again).
    pub(crate) from_source: bool,
}

impl Basis {
    pub(crate) fn of(view: Arc<View>) -> Basis {
        Basis {
            snapshot: Arc::clone(view.current()),
            revision: view.revision,
            view,
            from_source: false,
        }
    }
}

struct Inner<S> {
    config: Arc<CacheConfig>,
    store: Arc<Store>,
    source: Arc<S>,
    codec: Arc<dyn Codec>,
    reflector: tokio::task::JoinHandle<()>,
    /// Asks the source for progress while reads wait (see `progress.rs`).
    requester: Arc<Requester>,
    requesting: tokio::task::JoinHandle<()>,
    /// What a watch the window cannot serve catches up from (`None` with catch-up off).
    upstream: Option<Arc<dyn Upstream>>,
}

impl<S: fmt::Debug> fmt::Debug for Inner<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inner")
            .field("config", &self.config)
            .field("store", &self.store)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl<S> Drop for Inner<S> {
    fn drop(&mut self) {
        // First: watchers the hub's close ends must not catch up to a cache that is gone.
        if let Some(upstream) = &self.upstream {
            upstream.close();
        }
        self.reflector.abort();
        self.requesting.abort();
    }
}

/// The watch cache of one resource. Cheap to clone; the reflector stops with the last clone.
///
/// ```
/// use std::sync::Arc;
/// use bytes::Bytes;
/// use watchcache_core::*;
///
/// // A toy codec: the value is "namespace/name".
/// struct Plain;
/// impl Codec for Plain {
///     fn decode(&self, raw: &[u8], rev: Revision) -> Result<ObjectVersion, CodecError> {
///         let s = std::str::from_utf8(raw).map_err(|e| CodecError::Decode(e.to_string()))?;
///         let (ns, name) = s.split_once('/').ok_or(CodecError::MissingName)?;
///         Ok(ObjectVersion::builder(ObjectKey::new(ns, name), rev).build())
///     }
///     fn encode(&self, _: &ObjectVersion, f: WireFormat) -> Result<Encoding, CodecError> {
///         Err(CodecError::UnsupportedFormat(f))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemorySource::new();
/// store.create("pods/default/a", Bytes::from_static(b"default/a"))?;
/// let cache = Cache::new(store.clone(), Arc::new(Plain), CacheConfig::new("pods", "pods/"))?;
///
/// let list = cache.list(&ListOptions::default()).await?; // a consistent read
/// assert_eq!(list.items.len(), 1);
///
/// let mut watch = cache.watch(WatchOptions { resource_version: Some(list.revision), ..Default::default() }).await?;
/// store.create("pods/default/b", Bytes::from_static(b"default/b"))?;
/// let event = watch.next().await.unwrap()?;
/// assert_eq!(event.object.unwrap().key().name(), "b");
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Cache<S> {
    inner: Arc<Inner<S>>,
}

impl<S> Clone for Cache<S> {
    fn clone(&self) -> Self {
        Cache {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S: Source> Cache<S> {
    /// Starts a cache of `config.prefix` in `source`: spawns its reflector on the current
    /// tokio runtime, which lists, then watches.
    pub fn new(source: S, codec: Arc<dyn Codec>, config: CacheConfig) -> Result<Self, BuildError> {
        let config = Arc::new(config.validated()?);
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| BuildError::NoRuntime)?;
        let store = Arc::new(Store::new());
        let source = Arc::new(source);
        let reflector = runtime.spawn(reflector::supervise(
            Arc::clone(&source),
            Arc::clone(&codec),
            Arc::clone(&config),
            Arc::clone(&store),
        ));
        let requester = Arc::new(Requester::default());
        let requesting = runtime.spawn(Arc::clone(&requester).run(
            Arc::clone(&source),
            config.prefix.clone(),
            Arc::clone(&store),
        ));
        let upstream = config.catch_up.clone().map(|reads| {
            Arc::new(CacheUpstream {
                source: Arc::clone(&source),
                codec: Arc::clone(&codec),
                config: Arc::clone(&config),
                store: Arc::clone(&store),
                reads,
                requester: Arc::clone(&requester),
                shared: SharedReads::default(),
                dropped: AtomicBool::new(false),
            }) as Arc<dyn Upstream>
        });
        Ok(Cache {
            inner: Arc::new(Inner {
                config,
                store,
                source,
                codec,
                reflector,
                requester,
                requesting,
                upstream,
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &CacheConfig {
        &self.inner.config
    }

    /// Counters.
    pub fn stats(&self) -> &CacheStats {
        &self.inner.store.stats
    }

    /// The counters, shared: they go on counting after the cache is dropped while its last
    /// watches and catch-ups finish (a CustomResourceDefinition served anew ends its watches
    /// between two revisions), so an exporter that holds them loses none of it.
    pub fn shared_stats(&self) -> Arc<CacheStats> {
        Arc::clone(&self.inner.store.stats)
    }

    /// Whether the cache is serving a followed source: its first list has completed and its
    /// reflector is running (not waiting to be replaced after a panic).
    pub fn is_ready(&self) -> bool {
        self.inner.store.is_ready() && self.inner.store.is_up()
    }

    /// The cache's revision (`ZERO` before the first list).
    pub fn revision(&self) -> Revision {
        self.inner.store.load().map_or(Revision::ZERO, |v| v.revision)
    }

    /// The state as of the last event the cache applied, at once and without any freshness
    /// guarantee (`None` before the first list): for in-process readers that follow the
    /// cache rather than serve a request (the RBAC authorizer's policy). Costs a load of the
    /// published view and two reference counts.
    pub fn current(&self) -> Option<Arc<Snapshot>> {
        self.inner.store.load().map(|v| Arc::clone(v.current()))
    }

    /// How many events the history window holds now (at most the capacity).
    pub fn history_len(&self) -> usize {
        self.inner.store.load().map_or(0, |v| v.hub.history_len())
    }

    /// How many times the current generation's writer has woken a watcher (for events,
    /// bookmarks and the close); progress notifications and consistent reads wake no one.
    pub fn watch_wakeups(&self) -> u64 {
        self.inner.store.load().map_or(0, |v| v.hub.wakeups())
    }

    /// The number of objects in the current state.
    pub fn len(&self) -> usize {
        self.inner.store.load().map_or(0, |v| v.current().len())
    }

    /// Whether the current state holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The oldest revision a LIST can match exactly, or continue from, with the cache's own
    /// state: the history window's floor (older revisions are read from the source while it
    /// retains them; snapshots that paginated LISTs pinned are kept beyond it).
    pub fn oldest_revision(&self) -> Revision {
        self.inner.store.load().map_or(Revision::ZERO, |v| v.oldest())
    }

    /// The oldest revision a watch can start after: the history window's floor (snapshots may
    /// be kept longer, for paging).
    pub fn oldest_watch_revision(&self) -> Revision {
        self.inner.store.load().map_or(Revision::ZERO, |v| v.hub.floor())
    }

    /// What a watch the window cannot serve catches up from; `None` with catch-up off.
    pub(crate) fn upstream(&self) -> Option<&Arc<dyn Upstream>> {
        self.inner.upstream.as_ref()
    }

    pub(crate) fn source(&self) -> &S {
        &self.inner.source
    }

    /// The continue tokens; there once the cache is ready (the reflector sets them before the
    /// first view).
    pub(crate) fn tokens(&self) -> Result<&Tokens, CacheError> {
        self.inner.store.tokens().ok_or(CacheError::NotReady {
            retry_after: Duration::from_secs(1),
        })
    }

    /// The view once the first list completed; waits up to the ready timeout.
    pub(crate) async fn ready_view(&self) -> Result<Arc<View>, CacheError> {
        let store = &self.inner.store;
        if let Some(view) = store.load() {
            return Ok(view);
        }
        let mut rx = store.subscribe();
        let wait = rx.wait_for(|_| store.is_ready());
        let _ = tokio::time::timeout(self.config().ready_timeout, wait).await;
        store.load().ok_or(CacheError::NotReady {
            retry_after: Duration::from_secs(1),
        })
    }

    /// The view once the cache has reached `revision`. While it waits, the cache's progress
    /// requester asks the source for a progress notification (one request at a time for all
    /// waiting reads), so a quiet resource catches up at once. On a source whose requested
    /// notifications cannot be ordered (and so never come), it waits only briefly for the
    /// watch to bring the revision: its callers then read from the source.
    pub(crate) async fn fresh_view(&self, revision: Revision) -> Result<Arc<View>, CacheError> {
        let view = self.ready_view().await?;
        if view.revision >= revision {
            return Ok(view);
        }
        let mut rx = self.inner.store.subscribe();
        let ordered = self.inner.source.progress_requests_are_ordered();
        let timeout = if ordered {
            self.config().fresh_timeout
        } else {
            self.config().fresh_timeout.min(UNORDERED_WAIT)
        };
        let reached = {
            let _waiting = ordered.then(|| self.inner.requester.wait());
            let wait = rx.wait_for(|r| *r >= revision);
            // Reduced to a bool at once: the `Ref` a wait returns holds a lock and must not
            // live across an await (it would also make this future !Send).
            matches!(tokio::time::timeout(timeout, wait).await, Ok(Ok(_)))
        };
        let view = self.ready_view().await?;
        if reached && view.revision >= revision {
            // The view is stored before its revision is announced, so it is at least as new.
            Ok(view)
        } else {
            Err(CacheError::TooLargeResourceVersion {
                requested: revision,
                current: view.revision,
            })
        }
    }

    /// The source's current revision, for a consistent read; bounded by the fresh timeout, so
    /// that a source without quorum answers 504 rather than holding the request.
    pub(crate) async fn current_revision(&self) -> Result<Revision, CacheError> {
        let read = self.inner.source.current_revision();
        match tokio::time::timeout(self.config().fresh_timeout, read).await {
            Ok(r) => r.map_err(CacheError::Source),
            Err(_) => Err(CacheError::Source(SourceError::Unavailable(
                "the source did not give its current revision in time".into(),
            ))),
        }
    }

    /// The basis of a read at `rv`: consistent (unset), any (`0`), or at least `rv`.
    pub(crate) async fn basis_for(&self, rv: Option<Revision>) -> Result<Basis, CacheError> {
        match rv {
            None => {
                self.ready_view().await?;
                let current = self.current_revision().await?;
                self.basis_at_least(current).await
            }
            Some(Revision::ZERO) => Ok(Basis::of(self.ready_view().await?)),
            Some(n) => self.basis_at_least(n).await,
        }
    }

    /// The cache's state once it has reached `revision`; when it has not in time (at once, on
    /// a source that cannot order progress), a list of the source instead, as the apiserver
    /// falls back to etcd for a consistent read its cache does not reach.
    async fn basis_at_least(&self, revision: Revision) -> Result<Basis, CacheError> {
        match self.fresh_view(revision).await {
            Ok(view) => Ok(Basis::of(view)),
            Err(CacheError::TooLargeResourceVersion { requested, .. }) => {
                let view = self.ready_view().await?;
                let snapshot = self.source_snapshot(None).await?;
                if snapshot.revision() < requested {
                    return Err(CacheError::TooLargeResourceVersion {
                        requested,
                        current: snapshot.revision(),
                    });
                }
                self.inner
                    .store
                    .stats
                    .source_reads
                    .fetch_add(1, Ordering::Relaxed);
                Ok(Basis {
                    revision: snapshot.revision(),
                    snapshot,
                    view,
                    from_source: true,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// The state at exactly `revision`: the cache's snapshot of it, or, when the cache no
    /// longer (or not yet) holds it, the source's while the source retains it. Below the
    /// source's compacted revision it is `Expired`, whatever the cache still holds, as the
    /// apiserver answers.
    pub(crate) async fn snapshot_at(&self, revision: Revision) -> Result<Basis, CacheError> {
        let basis = |view, snapshot, from_source| Basis {
            view,
            snapshot,
            revision,
            from_source,
        };
        let compacted = self.inner.source.compacted_revision();
        if revision < compacted {
            return Err(CacheError::Expired(Expired {
                requested: revision,
                oldest: compacted,
            }));
        }
        if let Some(snapshot) = self.inner.store.pinned(revision) {
            return Ok(basis(self.ready_view().await?, snapshot, false));
        }
        let view = match self.fresh_view(revision).await {
            Ok(view) => match view.at(revision) {
                Ok(snapshot) => {
                    if revision < view.current().revision() {
                        self.inner
                            .store
                            .stats
                            .undone_reads
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    return Ok(basis(view, snapshot, false));
                }
                Err(_) => view,
            },
            // Not reached in time: the source's state at the revision, if it has it.
            Err(CacheError::TooLargeResourceVersion { requested, current }) => {
                if self.current_revision().await? < requested {
                    return Err(CacheError::TooLargeResourceVersion { requested, current });
                }
                self.ready_view().await?
            }
            Err(e) => return Err(e),
        };
        let snapshot = self.source_snapshot(Some(revision)).await?;
        self.inner
            .store
            .stats
            .source_reads
            .fetch_add(1, Ordering::Relaxed);
        Ok(basis(view, snapshot, true))
    }

    /// Keeps `snapshot`, the state at `revision`, for the next pages of a LIST that continues
    /// it (see `Store::pin`).
    pub(crate) fn pin(&self, revision: Revision, snapshot: &Arc<Snapshot>) {
        self.inner
            .store
            .pin(revision, snapshot, self.config().snapshot_retention);
    }

    /// The source's state of the prefix at `at` (or now), decoded with the cache's codec as
    /// the reflector decodes it.
    async fn source_snapshot(&self, at: Option<Revision>) -> Result<Arc<Snapshot>, CacheError> {
        let config = self.config();
        let list = match self.inner.source.list(&config.prefix, at).await {
            Ok(list) => list,
            Err(SourceError::Compacted { compact_revision }) => {
                return Err(CacheError::Expired(Expired {
                    requested: at.unwrap_or(Revision::ZERO),
                    oldest: compact_revision,
                }));
            }
            Err(e) => return Err(CacheError::Source(e)),
        };
        let items = list
            .items
            .iter()
            .filter_map(|i| reflector::decode(&self.inner.codec, config, &self.inner.store.stats, i))
            .collect();
        let mut snapshot = Snapshot::new(list.revision, items);
        if let Some(field) = &config.trigger_field {
            snapshot = snapshot.with_index(field);
        }
        Ok(Arc::new(snapshot))
    }

    /// A consistent GET the cache has not reached, from the source: the object and the
    /// revision read at.
    pub(crate) async fn source_get(
        &self,
        key: &ObjectKey,
    ) -> Result<(Option<Arc<ObjectVersion>>, Revision), CacheError> {
        let config = self.config();
        let (item, revision) = self
            .inner
            .source
            .read(&storage_key(&config.prefix, key))
            .await
            .map_err(CacheError::Source)?;
        self.inner
            .store
            .stats
            .source_reads
            .fetch_add(1, Ordering::Relaxed);
        let object =
            item.and_then(|i| reflector::decode(&self.inner.codec, config, &self.inner.store.stats, &i));
        Ok((object, revision))
    }
}
