//! The cache: one resource's current state and history, served with the apiserver's
//! resourceVersion semantics, kept up to date by its [reflector](crate::reflector).
//!
//! | request | served as |
//! |---|---|
//! | LIST, rv unset | consistent read: the source's current revision, then wait (bounded) until the cache has it |
//! | LIST, rv "0" | the current snapshot; `limit` and `continue` are honoured |
//! | LIST, rv N (NotOlderThan) | wait until the cache is at N or later (bounded, else `TooLargeResourceVersion`), the newest snapshot |
//! | LIST, rv N, Exact | the retained snapshot at N, else `Expired` |
//! | LIST with continue | the snapshot the token names, from the key after the token's key |
//! | WATCH, rv unset or "0" | ADDED for the current state (rv unset: after a consistent read), then live |
//! | WATCH, rv N | every event after N from the history window, then live; N older than the window is `Expired` |
//! | WATCH, sendInitialEvents | ADDED for the state, a bookmark marking the end of the initial events, then live |
//! | WATCH, bookmarks | periodic bookmarks with the cache's revision, and one after each progress notification |
//!
//! State is published as one immutable [`State`] through `ArcSwap`: the hub of the current
//! list-watch generation, the snapshots of the history window (one per ring entry, oldest
//! first) and the cache's revision. A reader loads it once and sees all three agree.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use futures_core::Stream;
use tokio::sync::watch;

use crate::continue_token::Tokens;
use crate::error::{BuildError, CacheError, Expired, WatchError};
use crate::event::{Delivery, EventKind, WatchEvent};
use crate::filter::Filter;
use crate::object::{Codec, ObjectKey, ObjectVersion};
use crate::reflector::Reflector;
use crate::rv::Revision;
use crate::snapshot::{ListItems, Snapshot, page};
use crate::source::Source;
use crate::watcher::{WatchHub, WatchSpec, Watcher};

/// How a LIST's resourceVersion is matched.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ResourceVersionMatch {
    /// Any state at least as new as the requested revision (the default).
    NotOlderThan,
    /// The state at exactly the requested revision.
    Exact,
}

/// A LIST request.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// `resourceVersion`: `None` for a consistent read, `Some(ZERO)` for any state.
    pub resource_version: Option<Revision>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<ResourceVersionMatch>,
    /// `limit`: at most this many items; `None` or 0 for all.
    pub limit: Option<usize>,
    /// `continue`: a token from a previous page.
    pub continue_token: Option<String>,
    /// Namespace and selectors.
    pub filter: Filter,
}

/// A LIST answer: the revision, the page's items (shared, lent one at a time) and how to
/// continue.
#[derive(Debug)]
pub struct ListResult {
    /// The revision the list is a state at (`metadata.resourceVersion`).
    pub revision: Revision,
    /// The token for the next page, if more items follow (`metadata.continue`).
    pub continue_token: Option<String>,
    /// How many items follow this page, when known (`metadata.remainingItemCount`): set only
    /// with a continue token and no label or field selector, as the apiserver does.
    pub remaining_item_count: Option<u64>,
    /// The items, in key order.
    pub items: ListItems,
}

/// A WATCH request.
#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    /// `resourceVersion`: `None` or `Some(ZERO)` start with the current state.
    pub resource_version: Option<Revision>,
    /// `sendInitialEvents`.
    pub send_initial_events: bool,
    /// `allowWatchBookmarks`.
    pub allow_bookmarks: bool,
    /// Namespace and selectors.
    pub filter: Filter,
}

/// Tuning of a cache; every field has a default.
#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// The resource name (`pods`), used in errors and continue tokens.
    pub resource: String,
    /// The source key prefix listed and watched (`pods/`).
    pub prefix: String,
    /// The history window's upper bound in events: a power of two. Default 4096.
    pub capacity: usize,
    /// The window's lower bound: this many newest events are kept whatever their age.
    /// Default 100, the apiserver's lower bound.
    pub retain_min_events: usize,
    /// Events older than this, beyond the lower bound, are released so their memory returns
    /// (the apiserver's `eventFreshDuration`). Default 75 s.
    pub fresh_window: Duration,
    /// How long reads wait for the cache to reach a revision. Default 3 s.
    pub fresh_timeout: Duration,
    /// How long requests wait for the first list before `NotReady`. Default 3 s.
    pub ready_timeout: Duration,
    /// How often opted-in watchers get a bookmark. Default 60 s.
    pub bookmark_interval: Duration,
    /// The field parked watchers are indexed by (`spec.nodeName` for pods); selectable too.
    pub trigger_field: Option<String>,
    /// Selectable fields beyond `metadata.name` and `metadata.namespace`.
    pub fields: Vec<String>,
    /// The first relist or rewatch delay; doubles up to `backoff_max`, with jitter.
    pub backoff_initial: Duration,
    /// The longest relist or rewatch delay.
    pub backoff_max: Duration,
}

impl CacheConfig {
    /// Defaults for `resource`, whose keys live under `prefix`.
    pub fn new(resource: &str, prefix: &str) -> Self {
        CacheConfig {
            resource: resource.to_owned(),
            prefix: prefix.to_owned(),
            capacity: crate::watcher::DEFAULT_CAPACITY,
            retain_min_events: 100,
            fresh_window: Duration::from_secs(75),
            fresh_timeout: Duration::from_secs(3),
            ready_timeout: Duration::from_secs(3),
            bookmark_interval: Duration::from_secs(60),
            trigger_field: None,
            fields: Vec::new(),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
        }
    }
}

/// What readers see, published as a whole.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) hub: WatchHub,
    /// One snapshot per entry of the history window plus the generation's first, oldest first.
    pub(crate) snapshots: imbl::Vector<Arc<Snapshot>>,
    /// The cache's revision: at least the newest snapshot's (progress notifications raise it).
    pub(crate) revision: Revision,
}

impl State {
    fn current(&self) -> &Arc<Snapshot> {
        self.snapshots
            .back()
            .expect("a state always has its generation's first snapshot")
    }

    /// The snapshot that is the state at `revision` (at most the cache's revision).
    fn at(&self, revision: Revision) -> Result<Arc<Snapshot>, CacheError> {
        let oldest = self.snapshots.front().map_or(self.revision, |s| s.revision());
        if revision < oldest {
            return Err(CacheError::Expired(Expired {
                requested: revision,
                oldest,
            }));
        }
        let after = match self.snapshots.binary_search_by(|s| {
            if s.revision() <= revision {
                std::cmp::Ordering::Less
            } else {
                std::cmp::Ordering::Greater
            }
        }) {
            Ok(i) | Err(i) => i,
        };
        Ok(Arc::clone(&self.snapshots[after - 1]))
    }
}

/// Counters, for tests and metrics.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Completed lists of the source (the first one included).
    pub lists: AtomicU64,
    /// Source values that could not be decoded and were skipped.
    pub decode_errors: AtomicU64,
    /// Events applied.
    pub events: AtomicU64,
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: CacheConfig,
    pub(crate) state: ArcSwapOption<State>,
    pub(crate) revision: watch::Sender<Revision>,
    pub(crate) tokens: Tokens,
    pub(crate) stats: CacheStats,
}

#[derive(Debug)]
struct Inner<S> {
    shared: Arc<Shared>,
    source: Arc<S>,
    reflector: tokio::task::JoinHandle<()>,
}

impl<S> Drop for Inner<S> {
    fn drop(&mut self) {
        self.reflector.abort();
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
    pub fn new(source: S, codec: Arc<dyn Codec>, mut config: CacheConfig) -> Result<Self, BuildError> {
        // The trigger field is selectable too.
        if let Some(t) = &config.trigger_field
            && !config.fields.contains(t)
        {
            config.fields.push(t.clone());
        }
        if config.capacity < 2 || !config.capacity.is_power_of_two() {
            return Err(BuildError::CapacityNotPowerOfTwo(config.capacity));
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| BuildError::NoRuntime)?;
        let shared = Arc::new(Shared {
            tokens: Tokens::new(&config.resource),
            config,
            state: ArcSwapOption::empty(),
            revision: watch::channel(Revision::ZERO).0,
            stats: CacheStats::default(),
        });
        let source = Arc::new(source);
        let reflector = Reflector::new(Arc::clone(&source), codec, Arc::clone(&shared));
        let reflector = runtime.spawn(reflector.run());
        Ok(Cache {
            inner: Arc::new(Inner {
                shared,
                source,
                reflector,
            }),
        })
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// The configuration.
    pub fn config(&self) -> &CacheConfig {
        &self.shared().config
    }

    /// Counters.
    pub fn stats(&self) -> &CacheStats {
        &self.shared().stats
    }

    /// Whether the first list has completed.
    pub fn is_ready(&self) -> bool {
        self.shared().state.load().is_some()
    }

    /// The cache's revision (`ZERO` before the first list).
    pub fn revision(&self) -> Revision {
        self.shared()
            .state
            .load()
            .as_ref()
            .map_or(Revision::ZERO, |s| s.revision)
    }

    /// How many events the history window holds now (at most the capacity).
    pub fn history_len(&self) -> usize {
        self.shared().state.load().as_ref().map_or(0, |s| {
            let ring = s.hub.ring();
            (ring.tail() - ring.oldest_seq()) as usize
        })
    }

    /// The number of objects in the current state.
    pub fn len(&self) -> usize {
        self.shared()
            .state
            .load()
            .as_ref()
            .map_or(0, |s| s.current().len())
    }

    /// Whether the current state holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The oldest revision a watch can start after, or a LIST match exactly.
    pub fn oldest_revision(&self) -> Revision {
        self.shared().state.load().as_ref().map_or(Revision::ZERO, |s| {
            s.snapshots.front().map_or(s.revision, |f| f.revision())
        })
    }

    /// The state once the first list completed; waits up to the ready timeout.
    async fn ready_state(&self) -> Result<Arc<State>, CacheError> {
        if let Some(state) = self.shared().state.load_full() {
            return Ok(state);
        }
        let mut rx = self.shared().revision.subscribe();
        let wait = rx.wait_for(|_| self.shared().state.load().is_some());
        let _ = tokio::time::timeout(self.config().ready_timeout, wait).await;
        self.shared().state.load_full().ok_or(CacheError::NotReady {
            retry_after: Duration::from_secs(1),
        })
    }

    /// The state once the cache has reached `revision`; asks the source for a progress
    /// notification when it must wait, so a quiet resource catches up at once.
    async fn fresh_state(&self, revision: Revision) -> Result<Arc<State>, CacheError> {
        let state = self.ready_state().await?;
        if state.revision >= revision {
            return Ok(state);
        }
        let mut rx = self.shared().revision.subscribe();
        // A failed request only means we wait for the periodic notification or a write.
        let _ = self.inner.source.request_progress().await;
        let wait = rx.wait_for(|r| *r >= revision);
        // Reduced to a bool at once: the `Ref` a wait returns holds a lock and must not live
        // across the await below (it would also make this future !Send).
        let reached = matches!(
            tokio::time::timeout(self.config().fresh_timeout, wait).await,
            Ok(Ok(_))
        );
        let state = self.ready_state().await?;
        if reached && state.revision >= revision {
            // The state is stored before the revision is announced, so it is at least as new.
            Ok(state)
        } else {
            Err(CacheError::TooLargeResourceVersion {
                requested: revision,
                current: state.revision,
            })
        }
    }

    /// A consistent read's state: at least the source's current revision.
    async fn consistent_state(&self) -> Result<Arc<State>, CacheError> {
        self.ready_state().await?;
        let current = self
            .inner
            .source
            .current_revision()
            .await
            .map_err(CacheError::Source)?;
        self.fresh_state(current).await
    }

    async fn state_for(&self, rv: Option<Revision>) -> Result<Arc<State>, CacheError> {
        match rv {
            None => self.consistent_state().await,
            Some(Revision::ZERO) => self.ready_state().await,
            Some(n) => self.fresh_state(n).await,
        }
    }

    /// GET: the object at `key` and the revision it was read at. `resource_version` as for
    /// LIST with NotOlderThan.
    pub async fn get(
        &self,
        key: &ObjectKey,
        resource_version: Option<Revision>,
    ) -> Result<(Option<Arc<ObjectVersion>>, Revision), CacheError> {
        let state = self.state_for(resource_version).await?;
        Ok((state.current().get(key).cloned(), state.revision))
    }

    /// LIST; see the module docs for the resourceVersion rules.
    pub async fn list(&self, opts: &ListOptions) -> Result<ListResult, CacheError> {
        let invalid = |m: &str| Err(CacheError::InvalidRequest(m.to_owned()));
        let rv = opts.resource_version;
        if opts.continue_token.is_some() {
            if rv.is_some_and(|r| r != Revision::ZERO) {
                return invalid("specifying resource version is not allowed when using continue");
            }
            if opts.resource_version_match.is_some() {
                return invalid("resourceVersionMatch is forbidden when continue is provided");
            }
        }
        if opts.resource_version_match == Some(ResourceVersionMatch::Exact)
            && rv.is_none_or(|r| r == Revision::ZERO)
        {
            return invalid("resourceVersionMatch=Exact requires a non-zero resourceVersion");
        }
        opts.filter
            .check_fields(&self.config().fields)
            .map_err(CacheError::Selector)?;

        let (snapshot, revision, start_after) = match &opts.continue_token {
            Some(token) => {
                let c = self
                    .shared()
                    .tokens
                    .decode(token)
                    .map_err(CacheError::InvalidContinue)?;
                let state = self.ready_state().await?;
                if c.revision > state.revision {
                    return Err(CacheError::InvalidContinue(
                        "the token is newer than this cache".into(),
                    ));
                }
                (state.at(c.revision)?, c.revision, Some(c.after))
            }
            None => {
                let state = self.state_for(rv).await?;
                match (opts.resource_version_match, rv) {
                    (Some(ResourceVersionMatch::Exact), Some(n)) => (state.at(n)?, n, None),
                    _ => (Arc::clone(state.current()), state.revision, None),
                }
            }
        };
        let filter = &opts.filter;
        let range = snapshot.range_of(filter.required_namespace());
        let start = match &start_after {
            Some(key) => match snapshot.position(key) {
                Ok(i) => i + 1,
                Err(i) => i,
            },
            None => range.start,
        };
        let selects_all = filter.labels().is_everything() && filter.fields().is_everything();
        let limit = opts.limit.filter(|&l| l > 0);
        let page = page(&snapshot, range, start, limit, filter, selects_all);
        let continue_token = page
            .more_after
            .as_ref()
            .map(|k| self.shared().tokens.encode(revision, k));
        let remaining_item_count = (continue_token.is_some() && selects_all).then_some(page.rest as u64);
        Ok(ListResult {
            revision,
            continue_token,
            remaining_item_count,
            items: ListItems::new(snapshot, page.range, filter.clone(), page.count),
        })
    }

    /// WATCH; see the module docs for the resourceVersion rules.
    pub async fn watch(&self, opts: WatchOptions) -> Result<CacheWatch, CacheError> {
        opts.filter
            .check_fields(&self.config().fields)
            .map_err(CacheError::Selector)?;
        let with_state =
            opts.send_initial_events || matches!(opts.resource_version, None | Some(Revision::ZERO));
        // A relist may close the hub between loading the state and starting the watcher:
        // then the newer state has a new hub; try again with it.
        for _ in 0..3 {
            let state = self.state_for(opts.resource_version).await?;
            let (after, initial) = if with_state {
                let snapshot = Arc::clone(state.current());
                let range = snapshot.range_of(opts.filter.required_namespace());
                let count = range.len();
                (
                    state.revision,
                    Some(ListItems::new(snapshot, range, opts.filter.clone(), count)),
                )
            } else {
                (opts.resource_version.unwrap_or(state.revision), None)
            };
            let mut spec = WatchSpec::new(opts.filter.clone()).after(after);
            spec.bookmarks = opts.allow_bookmarks;
            match state.hub.watch(spec) {
                Ok(live) => {
                    return Ok(CacheWatch {
                        initial,
                        end_bookmark: opts.send_initial_events.then_some(after),
                        live,
                    });
                }
                Err(WatchError::Expired(e)) if with_state || e.requested >= self.oldest_revision() => {
                    continue;
                }
                Err(WatchError::Expired(e)) => return Err(CacheError::Expired(e)),
                Err(WatchError::Selector(e)) => return Err(CacheError::Selector(e)),
            }
        }
        Err(CacheError::NotReady {
            retry_after: Duration::from_secs(1),
        })
    }

    /// Compares a hash of (key, mod revision) over the cache's current state with the same
    /// hash over the source's state at the same revision, as the apiserver's consistency
    /// checker does.
    pub async fn check_consistency(&self) -> Result<Consistency, CacheError> {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let state = self.ready_state().await?;
        let revision = state.revision;
        let mut cache = DefaultHasher::new();
        for o in state.current().iter() {
            (o.key(), o.revision()).hash(&mut cache);
        }
        let listed = self
            .inner
            .source
            .list(&self.config().prefix, Some(revision))
            .await
            .map_err(CacheError::Source)?;
        let mut source_items: Vec<(ObjectKey, Revision)> = listed
            .items
            .iter()
            .filter_map(|i| {
                ObjectKey::from_source_key(&self.config().prefix, &i.key).map(|k| (k, i.mod_revision))
            })
            .collect();
        source_items.sort();
        let mut source = DefaultHasher::new();
        for (k, r) in &source_items {
            (k, r).hash(&mut source);
        }
        Ok(Consistency {
            revision,
            cache: cache.finish(),
            source: source.finish(),
        })
    }
}

/// The result of [`Cache::check_consistency`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Consistency {
    /// The revision both states were read at.
    pub revision: Revision,
    /// The cache's digest.
    pub cache: u64,
    /// The source's digest.
    pub source: u64,
}

impl Consistency {
    /// Whether the digests agree.
    pub fn is_consistent(&self) -> bool {
        self.cache == self.source
    }
}

/// A watch on the cache: initial events when asked for, then the live watcher.
#[derive(Debug)]
pub struct CacheWatch {
    initial: Option<ListItems>,
    end_bookmark: Option<Revision>,
    live: Watcher,
}

impl CacheWatch {
    /// Polls for the next delivery and lends it to `f`; `Ready(None)` once the watch ended.
    pub fn poll_next_with<R>(
        &mut self,
        cx: &mut Context<'_>,
        f: impl FnOnce(Delivery<'_>) -> R,
    ) -> Poll<Option<Result<R, Expired>>> {
        if let Some(items) = &mut self.initial {
            if let Some(object) = items.next_item() {
                let revision = object.revision();
                let d = Delivery {
                    kind: EventKind::Added,
                    revision,
                    object: Some(object),
                    initial_events_end: false,
                };
                return Poll::Ready(Some(Ok(f(d))));
            }
            self.initial = None;
        }
        if let Some(revision) = self.end_bookmark.take() {
            let d = Delivery {
                kind: EventKind::Bookmark,
                revision,
                object: None,
                initial_events_end: true,
            };
            return Poll::Ready(Some(Ok(f(d))));
        }
        self.live.poll_next_with(cx, f)
    }

    /// Waits for the next delivery and lends it to `f`; `None` once the watch ended.
    pub async fn next_with<R>(&mut self, mut f: impl FnMut(Delivery<'_>) -> R) -> Option<Result<R, Expired>> {
        std::future::poll_fn(|cx| self.poll_next_with(cx, &mut f)).await
    }

    /// Waits for the next delivery, owned; `None` once the watch ended.
    pub async fn next(&mut self) -> Option<Result<WatchEvent, Expired>> {
        self.next_with(|d| d.to_owned()).await
    }

    /// The revision the live part has seen everything up to.
    pub fn position(&self) -> Revision {
        self.live.position()
    }
}

impl Stream for CacheWatch {
    type Item = Result<WatchEvent, Expired>;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_next_with(cx, |d| d.to_owned())
    }
}
