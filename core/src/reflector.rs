//! The reflector: the cache's own list-watch loop against its source.
//!
//! List, then watch from the list's revision + 1. Every change is decoded once into an
//! [`ObjectVersion`], paired with the previous version the cache already holds, published to
//! the ring and applied to a new snapshot. Progress notifications advance the cache's
//! revision without a change and without a history slot, so a quiet resource does not make
//! reads at a newer revision wait, nor lose its window to them. A broken watch is re-opened from where it stopped; a
//! compacted one means history is lost, so the reflector lists again, installs a new
//! generation (a new ring and snapshot history) and closes the old hub, ending each of its
//! watchers with Expired: their cursors can no longer be honoured. Retries back off
//! exponentially with jitter.
//!
//! With `history_fill`, the first list of a cache is read at an older revision the source
//! still retains, and the changes since are replayed through the same path into the window;
//! the view is held back until the replay reaches the revision the source had at the start
//! (or the watch goes quiet), so a restarted cache serves resumed watches from before it
//! started instead of answering them 410.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use futures_util::{FutureExt, StreamExt};
use tracing::{debug, error, warn};

use crate::config::CacheConfig;
use crate::continue_token::Tokens;
use crate::event::Event;
use crate::interest::BOOKMARK_PHASES;
use crate::object::{Codec, ObjectVersion};
use crate::retention::Retention;
use crate::ring::Seq;
use crate::rv::Revision;
use crate::snapshot::Snapshot;
use crate::source::{
    Source, SourceChange, SourceError, SourceEvent, SourceItem, SourceList, parse_storage_key,
};
use crate::stats::CacheStats;
use crate::store::{Store, View};
use crate::watcher::{Publisher, WatchHub};

/// The most events applied in one run before the watchers they concern are woken.
const MAX_RUN: usize = 256;

/// How far back a history fill reaches, in revisions per slot of the history window.
const FILL_REVISIONS_PER_SLOT: u64 = 16;

/// A filling cache is published once it reaches the revision the source had when the fill
/// began, or once its watch has had nothing to replay for this long (a quiet prefix on a
/// source whose progress notifications come seldom: publishing then is only as stale as an
/// rv=0 read may be).
const FILL_IDLE: Duration = Duration::from_millis(250);

/// A watch open this long before it broke worked: it is opened again without a pause.
const WORKED: Duration = Duration::from_secs(1);

/// Exponential backoff with full jitter between half and the whole delay.
#[derive(Debug)]
struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            next: initial,
        }
    }

    fn reset(&mut self) {
        self.next = self.initial;
    }

    fn delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d.mul_f64(0.5 + fastrand::f64() * 0.5)
    }
}

/// Decodes one listed item, checking it is the object its key says (see [`decode_value`]).
pub(crate) fn decode(
    codec: &Arc<dyn Codec>,
    config: &CacheConfig,
    stats: &CacheStats,
    item: &SourceItem,
) -> Option<Arc<ObjectVersion>> {
    decode_value(codec, config, stats, &item.key, &item.value, item.mod_revision)
}

/// Decodes one source value, checking it is the object its key says. A value that does not
/// decode, or decodes to another object, is a corrupt object (KEP-3926's word): the cache
/// keeps its key and revision, so that reads including it fail naming it rather than skip it
/// or serve what it was before; it is counted and logged. A key outside the resource's layout
/// names no object a request can reach, and is skipped.
fn decode_value(
    codec: &Arc<dyn Codec>,
    config: &CacheConfig,
    stats: &CacheStats,
    key: &str,
    value: &[u8],
    revision: Revision,
) -> Option<Arc<ObjectVersion>> {
    decode_checked(codec, config, key, value, revision, |reason| {
        stats.decode_errors.fetch_add(1, Ordering::Relaxed);
        match reason {
            None => {
                warn!(resource = %config.resource, key, revision = %revision, "skipping a key outside the resource's layout")
            }
            Some(reason) => {
                warn!(resource = %config.resource, key, revision = %revision, %reason, "a corrupt object: its value does not decode to the object its key names")
            }
        }
    })
}

/// Decodes one source value as [`decode_value`] does, calling `bad` with why it is not an
/// object of the resource (`None`: its key is outside the layout) instead of counting and
/// logging it: a catch-up reads again what the reflector already reported.
pub(crate) fn decode_checked(
    codec: &Arc<dyn Codec>,
    config: &CacheConfig,
    key: &str,
    value: &[u8],
    revision: Revision,
    bad: impl FnOnce(Option<&str>),
) -> Option<Arc<ObjectVersion>> {
    let Some(expected) = parse_storage_key(&config.prefix, key) else {
        bad(None);
        return None;
    };
    let reason = match codec.decode(value, revision) {
        Ok(o) if *o.key() == expected => return Some(Arc::new(o)),
        Ok(o) => format!("the value is the object {}, not {expected}", o.key()),
        Err(e) => e.to_string(),
    };
    bad(Some(&reason));
    Some(Arc::new(ObjectVersion::corrupt(expected, revision, key, &reason)))
}

/// Runs the cache's reflector until the task is aborted, replacing one that panics (a codec
/// or source bug must not freeze the cache while it reports ready). The panicked reflector's
/// publisher is dropped with it, which ends its watchers with Expired; the cache reports not
/// ready until the replacement, after a backoff, has listed into a new generation.
pub(crate) async fn supervise<S: Source>(
    source: Arc<S>,
    codec: Arc<dyn Codec>,
    config: Arc<CacheConfig>,
    store: Arc<Store>,
) {
    let mut backoff = Backoff::new(config.backoff_initial, config.backoff_max);
    loop {
        let reflector = Reflector::new(
            Arc::clone(&source),
            Arc::clone(&codec),
            Arc::clone(&config),
            Arc::clone(&store),
        );
        let started = Instant::now();
        // The reflector owns everything it touches but the store, whose every update is one
        // atomic publication of a whole view: a panic leaves nothing half-written to observe.
        let outcome = std::panic::AssertUnwindSafe(reflector.run()).catch_unwind().await;
        store.set_up(false);
        store.stats.reflector_restarts.fetch_add(1, Ordering::Relaxed);
        let why = match &outcome {
            Err(panic) => panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned()),
            Ok(()) => "it returned".to_owned(),
        };
        error!(resource = %config.resource, reason = %why, "reflector stopped; restarting it");
        if started.elapsed() > config.backoff_max {
            backoff.reset();
        }
        tokio::time::sleep(backoff.delay()).await;
    }
}

pub(crate) struct Reflector<S> {
    source: Arc<S>,
    codec: Arc<dyn Codec>,
    config: Arc<CacheConfig>,
    store: Arc<Store>,
    publisher: Option<Publisher>,
    backoff: Backoff,
    /// What history is kept: the ring's entries and the snapshots.
    retention: Retention,
    /// While a history fill replays: the view built so far, not yet published, and the
    /// revision at which it will be.
    held: Option<(Arc<View>, Revision)>,
    /// Whether the next list is the generation's first (and may fill history).
    first: bool,
}

/// Why following the watch stopped.
enum Stop {
    /// History was compacted away: list again.
    Relist,
}

impl<S: Source> Reflector<S> {
    pub(crate) fn new(
        source: Arc<S>,
        codec: Arc<dyn Codec>,
        config: Arc<CacheConfig>,
        store: Arc<Store>,
    ) -> Self {
        let backoff = Backoff::new(config.backoff_initial, config.backoff_max);
        Reflector {
            source,
            codec,
            store,
            publisher: None,
            backoff,
            retention: Retention::new(&config),
            config,
            held: None,
            first: true,
        }
    }

    /// The list a generation starts from: at the current revision; or, for the first list
    /// with `history_fill`, at an older retained revision, with the revision to catch up to
    /// before publishing.
    async fn initial_list(&mut self) -> Result<(SourceList, Option<Revision>), SourceError> {
        let prefix = &self.config.prefix;
        if !(self.first && self.config.history_fill) {
            return Ok((self.source.list(prefix, None).await?, None));
        }
        let current = self.source.current_revision().await?;
        let span = self.config.capacity as u64 * FILL_REVISIONS_PER_SLOT;
        let mut at = Revision::new(
            current
                .get()
                .saturating_sub(span)
                .max(self.source.compacted_revision().get())
                .max(1),
        );
        // Compacted under us: once more from what the source says is left, then from now.
        for _ in 0..2 {
            match self.source.list(prefix, Some(at)).await {
                Ok(list) => return Ok((list, Some(current))),
                Err(SourceError::Compacted { compact_revision })
                    if compact_revision > at && compact_revision <= current =>
                {
                    at = compact_revision;
                }
                Err(SourceError::Compacted { .. }) => break,
                Err(e) => return Err(e),
            }
        }
        Ok((self.source.list(prefix, None).await?, None))
    }

    /// Publishes `view`, or holds it while a history fill has not caught up.
    fn publish(&mut self, view: View) {
        if let Some((_, target)) = &self.held
            && view.revision < *target
        {
            let target = *target;
            self.held = Some((Arc::new(view), target));
            return;
        }
        self.held = None;
        self.store.publish(view);
        self.store.set_up(true);
    }

    /// Publishes the view a history fill holds, caught up or not.
    fn release_held(&mut self) {
        if let Some((view, _)) = self.held.take() {
            debug!(resource = %self.config.resource, revision = %view.revision, "history fill published before its target: the watch went quiet");
            self.store.publish_arc(view);
            self.store.set_up(true);
        }
    }

    pub(crate) async fn run(mut self) {
        loop {
            if self.store.tokens().is_none() {
                match self.source.signing_key().await {
                    Ok(key) => self.store.set_tokens(Tokens::new(&self.config.resource, key)),
                    Err(e) => {
                        warn!(resource = %self.config.resource, error = %e, "cannot read the signing key");
                        tokio::time::sleep(self.backoff.delay()).await;
                        continue;
                    }
                }
            }
            match self.initial_list().await {
                Ok((list, fill_to)) => {
                    self.first = false;
                    self.install(list, fill_to);
                    self.backoff.reset();
                    match self.follow().await {
                        Stop::Relist => continue,
                    }
                }
                Err(e) => {
                    warn!(resource = %self.config.resource, error = %e, "list failed");
                    tokio::time::sleep(self.backoff.delay()).await;
                }
            }
        }
    }

    fn view(&self) -> Arc<View> {
        match &self.held {
            Some((view, _)) => Arc::clone(view),
            None => self.store.load().expect("installed before following"),
        }
    }

    /// Decodes one source value, checking it is the object its key says.
    fn decode(&self, key: &str, value: &[u8], revision: Revision) -> Option<Arc<ObjectVersion>> {
        decode_value(&self.codec, &self.config, &self.store.stats, key, value, revision)
    }

    /// Installs a new generation from a list: new snapshot history, new ring; the old hub is
    /// closed so its watchers end with Expired. With `fill_to`, the generation is held back
    /// until the events replayed after the list reach that revision.
    fn install(&mut self, list: SourceList, fill_to: Option<Revision>) {
        let config = Arc::clone(&self.config);
        // Consumed as decoded: each raw value is freed once its object is made, so the sync's
        // peak is about the decoded state, not that plus every raw value.
        let SourceList { items, revision } = list;
        let items: Vec<_> = items
            .into_iter()
            .filter_map(|i| self.decode(&i.key, &i.value, i.mod_revision))
            .collect();
        let mut snapshot = Snapshot::new(revision, items);
        if let Some(field) = &config.trigger_field {
            snapshot = snapshot.with_index(field);
        }
        let snapshot = Arc::new(snapshot);
        let mut builder = WatchHub::builder().capacity(config.capacity).start(revision);
        for f in config
            .fields
            .iter()
            .filter(|f| Some(*f) != config.trigger_field.as_ref())
        {
            builder = builder.field(f);
        }
        if let Some(t) = &config.trigger_field {
            builder = builder.trigger_field(t);
        }
        let (publisher, hub) = match builder.build() {
            Ok(built) => built,
            // The capacity was validated when the cache was built.
            Err(e) => unreachable!("cache config validated at construction: {e}"),
        };
        let view = View {
            hub,
            current: snapshot,
            revision,
        };
        match fill_to {
            Some(target) if target > revision => {
                debug!(resource = %config.resource, from = %revision, to = %target, "filling history");
                self.held = Some((Arc::new(view), target));
            }
            // Published before the old hub is closed: a watcher the close ends and that
            // retries finds the new generation.
            _ => self.publish(view),
        }
        if let Some(old) = self.publisher.replace(publisher) {
            old.close(revision);
        }
        self.retention.clear();
        self.store.stats.lists.fetch_add(1, Ordering::Relaxed);
        debug!(resource = %config.resource, revision = %revision, "listed");
    }

    /// Publishes every event of one revision to the ring, and the snapshot after all of them:
    /// a watcher and a LIST see the whole revision or none of it.
    fn push(&mut self, revision: Revision, events: Vec<Event>) {
        let view = self.view();
        let Some(publisher) = self.publisher.as_mut() else {
            return;
        };
        let now = Instant::now();
        let next = Arc::new(view.current().apply_all(&events));
        let superseded: Vec<usize> = events
            .iter()
            .map(|e| e.prev().map_or(0, |p| p.retained_bytes()))
            .collect();
        let count = events.len() as u64;
        match publisher.publish_revision_deferred(events) {
            Ok(seqs) => {
                for (seq, bytes) in (seqs.start.get()..seqs.end.get()).zip(superseded) {
                    self.retention.published(now, Seq::new(seq), bytes);
                }
            }
            Err(e) => {
                warn!(resource = %self.config.resource, error = %e, "revision out of order, skipped");
                return;
            }
        }
        self.store.stats.events.fetch_add(count, Ordering::Relaxed);
        self.release(now, next, revision.max(view.revision), &view);
    }

    /// Publishes a view of `current` at `revision`, after releasing the history that
    /// retention says must go (beyond its count, age or bytes; see `retention.rs`).
    fn release(&mut self, now: Instant, current: Arc<Snapshot>, revision: Revision, view: &View) {
        if let (Some(below), Some(publisher)) = (self.retention.release(now), self.publisher.as_mut()) {
            let floor = publisher.trim(below);
            debug!(resource = %self.config.resource, %floor, "released history");
        }
        self.store
            .stats
            .history_bytes
            .store(self.retention.bytes() as u64, Ordering::Relaxed);
        self.publish(View {
            hub: view.hub.clone(),
            current,
            revision,
        });
    }

    /// Applies one revision's changes (or a progress notification). A revision at or below
    /// the cache's was applied already, whole (a re-watch replays from the next one). Each
    /// change is paired with the version it replaces in the state before the revision (a
    /// revision changes each key once); changes of keys the cache does not hold, or that do
    /// not decode, publish nothing, and a revision with nothing left is a progress.
    fn apply(&mut self, event: SourceEvent) {
        let view = self.view();
        let (revision, changes) = match event {
            SourceEvent::Progress { revision } => return self.progress(revision),
            SourceEvent::Changes { revision, .. } if revision <= view.revision => return,
            SourceEvent::Changes { revision, changes } => (revision, changes),
        };
        let current = view.current();
        let mut events = Vec::with_capacity(changes.len());
        for change in changes {
            match change {
                SourceChange::Put { key, value, .. } => {
                    let Some(object) = self.decode(&key, &value, revision) else {
                        continue;
                    };
                    events.push(match current.get(object.key()).cloned() {
                        Some(prev) => Event::Modified { object, prev },
                        None => Event::Added { object },
                    });
                }
                SourceChange::Delete { key, .. } => {
                    let prev =
                        parse_storage_key(&self.config.prefix, &key).and_then(|k| current.get(&k).cloned());
                    if let Some(prev) = prev {
                        events.push(Event::Deleted { revision, prev });
                    }
                }
            }
        }
        if events.is_empty() {
            self.progress(revision);
        } else {
            self.push(revision, events);
        }
    }

    /// Wakes the watchers of the events applied since the last flush.
    fn flush(&mut self) {
        if let Some(publisher) = self.publisher.as_mut() {
            publisher.flush();
        }
    }

    /// Releases what has aged out of history (see `retention.rs`), so that its memory returns.
    fn retain(&mut self) {
        let view = self.view();
        self.release(Instant::now(), Arc::clone(view.current()), view.revision, &view);
        self.store
            .prune_pinned(self.config.snapshot_retention, self.source.compacted_revision());
    }

    /// The source is at `revision` with no change for us: the hub's revision (what bookmarks
    /// carry) and the cache's move there. No history slot is taken and no watcher is woken, so
    /// however many progress notifications and consistent reads pass, a quiet resource's
    /// window stays as it was.
    fn progress(&mut self, revision: Revision) {
        let view = self.view();
        if revision <= view.revision {
            return;
        }
        if let Some(publisher) = self.publisher.as_mut() {
            publisher.progress(revision);
        }
        self.publish(View {
            hub: view.hub.clone(),
            current: Arc::clone(view.current()),
            revision,
        });
    }

    /// After a watch broke: a watch that worked (it brought something, or stayed open a
    /// while) is opened again at once, so that a cache whose store member died moves to
    /// another without a pause (the source picks a live one); one that broke straight away
    /// backs off, as a failed open does.
    async fn pause_before_rewatch(&mut self, opened: Instant, delivered: bool) {
        if !(delivered || opened.elapsed() >= WORKED) {
            tokio::time::sleep(self.backoff.delay()).await;
        }
    }

    async fn follow(&mut self) -> Stop {
        // One group of the bookmark watchers per tick: each gets one bookmark per interval,
        // and they are spread over it.
        let interval = (self.config.bookmark_interval / BOOKMARK_PHASES as u32).max(Duration::from_millis(1));
        let mut bookmarks = tokio::time::interval_at(Instant::now() + interval, interval);
        bookmarks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let every = (self.config.fresh_window / 8).max(Duration::from_millis(10));
        let mut retention = tokio::time::interval_at(Instant::now() + every, every);
        retention.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let from = Revision::new(self.view().revision.get() + 1);
            let mut stream = match self.source.watch(&self.config.prefix, from).await {
                Ok(s) => s,
                Err(SourceError::Compacted { .. }) => return Stop::Relist,
                Err(e) => {
                    warn!(resource = %self.config.resource, error = %e, "watch failed");
                    tokio::time::sleep(self.backoff.delay()).await;
                    continue;
                }
            };
            if self.held.is_some() {
                // A source that orders requested progress tells us at once if the replay has
                // nothing more to give.
                let _ = self.source.request_progress(&self.config.prefix).await;
            }
            // Events already waiting are applied in a run, and the watchers they concern are
            // woken once for the run (`publish_deferred`, then `flush` before waiting again):
            // under load, one wake-up per watcher and burst rather than per event.
            let mut run = 0;
            let opened = Instant::now();
            let mut delivered = false;
            // When the watch last brought something: a fill is published once it has been
            // quiet for FILL_IDLE (ticks of the other timers do not count as activity).
            let mut active = Instant::now();
            loop {
                let ready = if run < MAX_RUN {
                    stream.next().now_or_never()
                } else {
                    None
                };
                let item = match ready {
                    Some(item) => {
                        run += 1;
                        active = Instant::now();
                        item
                    }
                    None => {
                        run = 0;
                        self.flush();
                        let filling = self.held.is_some();
                        tokio::select! {
                            item = stream.next() => {
                                active = Instant::now();
                                item
                            }
                            _ = tokio::time::sleep_until(active + FILL_IDLE), if filling => {
                                self.release_held();
                                continue;
                            }
                            _ = bookmarks.tick() => {
                                if let Some(publisher) = self.publisher.as_mut() {
                                    publisher.send_bookmarks();
                                }
                                continue;
                            }
                            _ = retention.tick() => {
                                self.retain();
                                continue;
                            }
                        }
                    }
                };
                match item {
                    Some(Ok(event)) => {
                        delivered = true;
                        self.apply(event);
                        self.backoff.reset();
                    }
                    Some(Err(SourceError::Compacted { compact_revision })) => {
                        self.flush();
                        debug!(resource = %self.config.resource, %compact_revision, "watch compacted");
                        return Stop::Relist;
                    }
                    Some(Err(e)) => {
                        self.flush();
                        warn!(resource = %self.config.resource, error = %e, "watch broke");
                        self.pause_before_rewatch(opened, delivered).await;
                        break;
                    }
                    None => {
                        self.flush();
                        self.pause_before_rewatch(opened, delivered).await;
                        break;
                    }
                }
            }
        }
    }
}
