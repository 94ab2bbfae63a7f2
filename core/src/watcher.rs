//! The hub: one [`Publisher`] feeding an [`EventRing`], and any number of [`Watcher`]s, each
//! only a cursor, a filter and a waker.
//!
//! # Wake-up protocol
//!
//! A watcher that finds nothing to read parks: under the hub's index lock it files its waker
//! under its [`Interest`], then, after unlocking, loads the ring's tail again. The writer, for
//! every event, stores the new tail (Release) and then takes the same lock to drain the
//! buckets the event may concern. The lock orders the two: either the writer's critical
//! section comes after the watcher's, and it finds and wakes the watcher; or it comes before,
//! and then the tail store that precedes it happens-before the watcher's re-check, which sees
//! the new event and does not sleep. A wake-up is never lost. The writer holds the lock only
//! to move wakers out of the index (O(woken)); it calls them after unlocking.
//!
//! A watcher that was woken resumes at the sequence number the writer stamped in its wake
//! cell (see `interest.rs`); one that stops parking by itself (the re-check found an event, or
//! it was polled spuriously and found one) removes its entry under the lock and reads on from
//! its own cursor.

use std::fmt;
use std::ops::Range;
use std::pin::Pin;
use std::task::{Context, Poll};

use crossbeam_epoch as epoch;
use futures_core::Stream;

use crate::event::{Delivery, Event, EventKind, WatchEvent};
use crate::filter::Filter;
use crate::interest::{Bucket, HubEntry, Interest, Registry, Role, WakeCell, wake_all};
use crate::loom::lock;
use crate::loom::sync::atomic::{AtomicU64, Ordering};
use crate::loom::sync::{Arc, Mutex};
use crate::ring::{CapacityError, EventRing, PublishError, Read, RingWriter, Seq};
use crate::rv::Revision;
use crate::selector::SelectorError;

/// How many entries a watcher may read and filter out in one poll before it yields to its
/// executor (it wakes itself and returns `Pending`), so a selective watcher catching up on a
/// long history cannot starve other tasks on its thread.
const SCAN_BUDGET: usize = if cfg!(watchcache_loom) { 2 } else { 512 };

/// The default history window, in events.
pub const DEFAULT_CAPACITY: usize = if cfg!(watchcache_loom) { 4 } else { 4096 };

/// `HubCore::closed` while the hub is open.
const OPEN: u64 = u64::MAX;

/// A watcher asked for history the window no longer holds, or was lapped by the writer.
///
/// Over HTTP this is `410 Gone` with reason `Expired`; the client re-lists.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Expired {
    /// The revision the watcher asked to continue after.
    pub requested: Revision,
    /// The oldest revision a watch can start after now.
    pub oldest: Revision,
}

impl fmt::Display for Expired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "too old resource version: {} ({})",
            self.requested, self.oldest
        )
    }
}

impl std::error::Error for Expired {}

/// A watch that could not be started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchError {
    /// The requested start is older than the history window.
    Expired(Expired),
    /// The filter selects on a field this resource does not declare.
    Selector(SelectorError),
}

impl fmt::Display for WatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchError::Expired(e) => e.fmt(f),
            WatchError::Selector(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for WatchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WatchError::Expired(e) => Some(e),
            WatchError::Selector(e) => Some(e),
        }
    }
}

impl From<Expired> for WatchError {
    fn from(e: Expired) -> Self {
        WatchError::Expired(e)
    }
}

impl From<SelectorError> for WatchError {
    fn from(e: SelectorError) -> Self {
        WatchError::Selector(e)
    }
}

/// What a hub's publisher and watchers share.
#[derive(Debug)]
struct HubCore {
    ring: Arc<EventRing<HubEntry>>,
    registry: Mutex<Registry>,
    /// `OPEN`, or the oldest revision a watch can start after in whatever replaced this hub.
    closed: AtomicU64,
    /// The revision every event up to which has been published and drained: the last event's,
    /// or a progress notification's above it. What a bookmark carries.
    progress: AtomicU64,
    /// Watchers the writer has woken (by events, bookmark ticks and the close). Written only by
    /// the writer; Relaxed, a counter.
    wakeups: AtomicU64,
    trigger: Option<Box<str>>,
    fields: Box<[Box<str>]>,
    next_id: AtomicU64,
}

/// Configures a hub; see [`WatchHub::builder`].
#[derive(Clone, Debug)]
pub struct HubBuilder {
    capacity: usize,
    start: Revision,
    trigger: Option<Box<str>>,
    fields: Vec<Box<str>>,
}

impl HubBuilder {
    /// The history window in events: a power of two, at least 2. Default 4096.
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// The revision the history starts after (the revision of the initial list). Watches may
    /// start after any revision from this one on. Default 0.
    pub fn start(mut self, revision: Revision) -> Self {
        self.start = revision;
        self
    }

    /// Declares a selectable field (beyond `metadata.name` and `metadata.namespace`).
    pub fn field(mut self, name: &str) -> Self {
        self.fields.push(name.into());
        self
    }

    /// The field parked watchers are indexed by, as the apiserver indexes pods by
    /// `spec.nodeName`; declared as selectable too.
    pub fn trigger_field(mut self, name: &str) -> Self {
        self.trigger = Some(name.into());
        self.field(name)
    }

    /// Builds the hub and its only publisher.
    pub fn build(self) -> Result<(Publisher, WatchHub), CapacityError> {
        let (ring, writer) = EventRing::new(self.capacity, self.start)?;
        let shared = Arc::new(HubCore {
            ring,
            registry: Mutex::new(Registry::default()),
            closed: AtomicU64::new(OPEN),
            progress: AtomicU64::new(self.start.get()),
            wakeups: AtomicU64::new(0),
            trigger: self.trigger,
            fields: self.fields.into_boxed_slice(),
            next_id: AtomicU64::new(0),
        });
        let publisher = Publisher {
            writer,
            shared: Arc::clone(&shared),
            last: self.start,
            woken: Vec::new(),
        };
        Ok((publisher, WatchHub { shared }))
    }
}

/// Where a watcher starts reading.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum StartAt {
    /// With the next event published.
    Now,
    /// With the first event whose revision is above this one (every event after it).
    After(Revision),
}

/// What a watcher selects and where it starts.
#[derive(Clone, Debug)]
pub struct WatchSpec {
    /// The objects it selects.
    pub filter: Filter,
    /// Where it starts.
    pub start: StartAt,
    /// Whether it receives bookmarks.
    pub bookmarks: bool,
}

impl WatchSpec {
    /// Selects with `filter`, starting now, without bookmarks.
    pub fn new(filter: Filter) -> Self {
        WatchSpec {
            filter,
            start: StartAt::Now,
            bookmarks: false,
        }
    }

    /// Starts with every event after `revision`.
    pub fn after(mut self, revision: Revision) -> Self {
        self.start = StartAt::After(revision);
        self
    }

    /// Receives bookmarks.
    pub fn with_bookmarks(mut self) -> Self {
        self.bookmarks = true;
        self
    }
}

/// The shared side of a hub: starts watchers. Cheap to clone.
///
/// # Examples
///
/// Publish, watch, and handle a watcher that fell out of the history window:
///
/// ```
/// use std::sync::Arc;
/// use watchcache_core::{Event, Filter, ObjectKey, ObjectVersion, Revision, WatchHub, WatchSpec};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let (mut publisher, hub) = WatchHub::builder().capacity(4).build()?;
/// let pod = |name: &str, rev| {
///     Arc::new(ObjectVersion::builder(ObjectKey::new("default", name), Revision::new(rev)).build())
/// };
///
/// let mut watcher = hub.watch(WatchSpec::new(Filter::everything()))?;
/// publisher.publish(Event::Added { object: pod("a", 1) })?;
/// let event = watcher.next().await.unwrap()?;
/// assert_eq!(event.revision, Revision::new(1));
///
/// // Six more events through a window of four: the watcher's cursor is lapped.
/// for rev in 2..=7 {
///     publisher.publish(Event::Added { object: pod(&format!("p{rev}"), rev) })?;
/// }
/// let expired = watcher.next().await.unwrap().unwrap_err();
/// assert_eq!(expired.requested, Revision::new(1));
/// assert!(watcher.next().await.is_none(), "an expired watcher ends");
///
/// // The client re-lists, then watches again from what it listed.
/// let mut watcher = hub.watch(WatchSpec::new(Filter::everything()).after(Revision::new(6)))?;
/// assert_eq!(watcher.next().await.unwrap()?.revision, Revision::new(7));
/// // Asking for history the window no longer holds is refused at the start.
/// assert!(hub.watch(WatchSpec::new(Filter::everything()).after(Revision::new(1))).is_err());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct WatchHub {
    shared: Arc<HubCore>,
}

impl HubCore {
    /// `Some(oldest)` once the publisher closed the hub.
    fn closed_at(&self) -> Option<Revision> {
        // Acquire pairs with the Release store in `Publisher::close`.
        match self.closed.load(Ordering::Acquire) {
            OPEN => None,
            oldest => Some(Revision::new(oldest)),
        }
    }

    fn progress(&self) -> Revision {
        // Acquire pairs with the Release stores in `Publisher::publish` and `progress`: every
        // event up to this revision was pushed, linked and drained before it was stored.
        Revision::new(self.progress.load(Ordering::Acquire))
    }
}

impl WatchHub {
    /// Configures a hub.
    pub fn builder() -> HubBuilder {
        HubBuilder {
            capacity: DEFAULT_CAPACITY,
            start: Revision::ZERO,
            trigger: None,
            fields: Vec::new(),
        }
    }

    /// How many events the history window holds now.
    pub fn history_len(&self) -> usize {
        self.shared.ring.len()
    }

    /// The revision of the newest event in the history window (`None` while it holds none).
    pub(crate) fn newest_event(&self) -> Option<Revision> {
        let ring = &self.shared.ring;
        (!ring.is_empty()).then(|| ring.head_revision())
    }

    /// The oldest revision a watch can start after: the history window's floor.
    pub fn floor(&self) -> Revision {
        self.shared.ring.floor()
    }

    /// The sequence number the next event will be published at.
    pub fn tail(&self) -> Seq {
        self.shared.ring.tail()
    }

    /// The hub's revision: the last event's, or the last progress notification's above it.
    pub fn revision(&self) -> Revision {
        self.shared.progress()
    }

    /// The number of watchers parked now.
    pub fn parked(&self) -> usize {
        lock(&self.shared.registry).parked()
    }

    /// How many times the writer has woken a watcher (for events, bookmarks and the close).
    pub fn wakeups(&self) -> u64 {
        self.shared.wakeups.load(Ordering::Relaxed)
    }

    /// The events after revision `after` up to `through` (inclusive), oldest first, cloned out
    /// of the ring (reference counts only): what must be undone from a snapshot at `through`
    /// to have the state at `after`. `Expired` when the window no longer holds them all.
    pub(crate) fn events_between(&self, after: Revision, through: Revision) -> Result<Vec<Event>, Expired> {
        let ring = &*self.shared.ring;
        let guard = epoch::pin();
        let expired = |oldest| Expired {
            requested: after,
            oldest,
        };
        let mut seq = ring.seq_after(after, &guard).map_err(expired)?;
        let mut events = Vec::new();
        loop {
            // SAFETY: `guard` is `epoch::pin()`'s, a guard of the default collector.
            match unsafe { ring.read_unchecked(seq, &guard) } {
                Read::Ready(entry) if entry.revision() <= through => {
                    events.push(entry.value().event.clone());
                    seq = seq.next();
                }
                Read::Ready(_) | Read::Empty => return Ok(events),
                Read::Lapped => return Err(expired(ring.floor())),
            }
        }
    }

    /// Hands a watch that was caught up from the store over to this hub: every event up to
    /// `position` was delivered to it (whole revisions), and the watcher this starts delivers
    /// every event after it, however many the writer publishes meanwhile; a `position` ahead
    /// of the hub is skipped up to as the events come. Fails with `Expired` while the window
    /// does not reach back to `position` (the catch-up reads on from the store), or once the
    /// hub is closed. Claim 14 of [`protocol`](crate::protocol).
    pub fn hand_over(
        &self,
        filter: Filter,
        bookmarks: bool,
        position: Revision,
    ) -> Result<Watcher, WatchError> {
        if position < self.floor() {
            return Err(Expired {
                requested: position,
                oldest: self.floor(),
            }
            .into());
        }
        // A watch from now would do only if nothing were published between this look and
        // its registration. (`HANDOVER_AFTER_POSITION` is true except in the loom model that
        // shows why.)
        let start = if !crate::loom::weaken::HANDOVER_AFTER_POSITION && self.revision() <= position {
            StartAt::Now
        } else {
            StartAt::After(position)
        };
        self.watch(WatchSpec {
            filter,
            start,
            bookmarks,
        })
    }

    /// Starts a watcher. Fails when its field selector names a field the hub does not
    /// declare, or when it asks for history older than the window.
    pub fn watch(&self, spec: WatchSpec) -> Result<Watcher, WatchError> {
        let shared = &self.shared;
        spec.filter.check_fields(&shared.fields)?;
        if let (Some(oldest), StartAt::After(requested)) = (shared.closed_at(), spec.start) {
            return Err(Expired { requested, oldest }.into());
        }
        let guard = epoch::pin();
        // Where a watch after a revision starts (a search, outside the registry's lock).
        let after = match spec.start {
            StartAt::Now => None,
            StartAt::After(rev) => {
                let seq = shared.ring.seq_after(rev, &guard).map_err(|oldest| Expired {
                    requested: rev,
                    oldest,
                })?;
                Some((seq, rev))
            }
        };
        drop(guard);
        let fields = spec.filter.fields();
        let namespace = spec.filter.required_namespace();
        let interest = if let Some(name) = fields.equality("metadata.name") {
            Interest::Name {
                namespace: namespace.unwrap_or("").into(),
                name: name.into(),
            }
        } else if let Some(value) = shared.trigger.as_deref().and_then(|t| fields.equality(t)) {
            Interest::Trigger(value.into())
        } else if let Some(ns) = namespace {
            Interest::Namespace(ns.into())
        } else {
            Interest::All
        };
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let cell = Arc::new(WakeCell::new());
        // A watch after a revision first passes over what is already published and does not
        // concern it (most of it, for a selective watcher), outside the registry's lock; then
        // over what came meanwhile, under it.
        let expired = |rev| Expired {
            requested: rev,
            oldest: shared.ring.floor(),
        };
        let skimmed = match after {
            Some((cursor, rev)) => {
                let from = Skimmed {
                    cursor,
                    position: rev,
                    complete: rev,
                };
                Some(skim(&shared.ring, &spec.filter, from, rev).ok_or_else(|| expired(rev))?)
            }
            None => None,
        };
        // Under the registry's lock the writer is not publishing: the tail is the first
        // sequence number it will chain for a new bucket, and every event below it has moved
        // the progress revision.
        let (bucket, at, skip_through, parked) = {
            let mut registry = lock(&shared.registry);
            let tail = shared.ring.tail();
            let (at, skip_through) = match (after, skimmed) {
                // Everything up to the progress revision is below the tail: nothing to skip.
                (None, _) | (_, None) => {
                    let progress = shared.progress();
                    let at = Skimmed {
                        cursor: tail,
                        position: progress,
                        complete: progress,
                    };
                    (at, Revision::ZERO)
                }
                // `rev` may lie ahead of the ring: entries up to it are skipped when they come.
                (Some((_, rev)), Some(from)) => {
                    let at = skim(&shared.ring, &spec.filter, from, rev).ok_or_else(|| expired(rev))?;
                    (at, rev)
                }
            };
            let cursor = at.cursor;
            let bucket = registry.register(&interest, tail, id, spec.bookmarks.then_some(&cell));
            // With nothing to read, the watcher is filed at once, verified idle (claim 6 of
            // `protocol.rs`): events that do not concern it cannot lap it before its first
            // poll, which may come late (a watch sends its initial events first). A close
            // stored before we took the lock is seen here; one after it drains us.
            // (`PARK_AT_START` is true except in the loom model that shows why.)
            let parked = crate::loom::weaken::PARK_AT_START && cursor >= tail && shared.closed_at().is_none();
            if parked {
                bucket.file(id, &cell);
            }
            (bucket, at, skip_through, parked)
        };
        Ok(Watcher {
            shared: Arc::clone(shared),
            bucket,
            cell,
            filter: spec.filter,
            interest,
            cursor: at.cursor,
            chain: None,
            position: at.position,
            complete: at.complete,
            skip_through,
            bookmarks: spec.bookmarks,
            id,
            parked,
            done: false,
        })
    }
}

/// The hub's only writer. Not `Clone`.
#[derive(Debug)]
pub struct Publisher {
    writer: RingWriter<HubEntry>,
    shared: Arc<HubCore>,
    last: Revision,
    /// Reused between events so that waking allocates nothing in the steady state.
    woken: Vec<Arc<WakeCell>>,
}

impl Publisher {
    /// Publishes an object event and wakes the parked watchers it may concern. Its revision
    /// must be above every earlier one. Never waits for a watcher: it takes the lock of each
    /// bucket the event is in only to move the parked watchers out (O(woken)).
    ///
    /// Bookmarks take no history slot: [`progress`](Self::progress) moves the revision they
    /// carry, and [`send_bookmarks`](Self::send_bookmarks) sends them.
    pub fn publish(&mut self, event: Event) -> Result<Seq, PublishError> {
        let seq = self.publish_deferred(event)?;
        self.flush();
        Ok(seq)
    }

    /// Publishes every event of one revision (one write that changed several keys: a prefix
    /// delete, a transaction, a lease's expiry) and wakes the watchers they concern. A watcher
    /// sees all of them or none: they become readable together, and a bookmark at their
    /// revision follows the last of them. See [`publish_revision_deferred`](Self::publish_revision_deferred).
    pub fn publish_revision(&mut self, events: Vec<Event>) -> Result<Range<Seq>, PublishError> {
        let seqs = self.publish_revision_deferred(events)?;
        self.flush();
        Ok(seqs)
    }

    /// Publishes like [`publish`](Self::publish) but leaves the watchers it concerns to be
    /// woken by the next [`flush`](Self::flush) (or `publish`, or the close): a writer with a
    /// burst of events wakes each watcher once and the executor once for the whole burst,
    /// instead of once per event. Until then the events are readable (a watcher that polls
    /// finds them); only the wake-ups wait.
    pub fn publish_deferred(&mut self, event: Event) -> Result<Seq, PublishError> {
        let revision = self.check(&event)?;
        Ok(self.publish_checked(revision, std::iter::once(event))?.start)
    }

    /// Publishes every event of one revision like [`publish_revision`](Self::publish_revision),
    /// leaving the wake-ups to the next [`flush`](Self::flush). The events must share one
    /// revision, above every earlier one (a revision is published once, whole); otherwise
    /// nothing is published. No event is no change (the caller reports a revision without
    /// events with [`progress`](Self::progress)).
    ///
    /// A revision with more events than the history window holds overwrites its own first
    /// events: watchers behind it are lapped, as by any burst larger than the window.
    pub fn publish_revision_deferred(&mut self, events: Vec<Event>) -> Result<Range<Seq>, PublishError> {
        let Some(first) = events.first() else {
            let tail = self.shared.ring.tail();
            return Ok(tail..tail);
        };
        let revision = self.check(first)?;
        if let Some(other) = events.iter().find(|e| e.revision() != revision) {
            return Err(PublishError::RevisionMixed {
                revision,
                other: other.revision(),
            });
        }
        self.publish_checked(revision, events.into_iter())
    }

    /// The revision of an event the hub can publish next.
    fn check(&self, event: &Event) -> Result<Revision, PublishError> {
        let revision = event.revision();
        if matches!(event, Event::Bookmark { .. }) {
            return Err(PublishError::Bookmark);
        }
        if revision <= self.last {
            return Err(PublishError::RevisionNotIncreasing {
                last: self.last,
                got: revision,
            });
        }
        Ok(revision)
    }

    /// Publishes `events`, all at `revision` (checked): staged into the ring, committed with
    /// one tail store, then linked into their buckets' chains and drained, in order; the
    /// progress revision moves last.
    fn publish_checked(
        &mut self,
        revision: Revision,
        events: impl ExactSizeIterator<Item = Event>,
    ) -> Result<Range<Seq>, PublishError> {
        let shared = &*self.shared;
        let count = events.len();
        let capacity = shared.ring.capacity();
        // Held across the push: a watcher registering now is either seen by this revision's
        // drains or chained only from the next sequence number (see `interest.rs`).
        let mut registry = lock(&shared.registry);
        let start = shared.ring.tail();
        // Events the revision itself overwrites before its commit are never readable: the
        // registry hears of them from these copies (reference counts only), so that the
        // watchers they concern are woken, and find themselves lapped.
        let mut overwritten = Vec::new();
        for (i, event) in events.enumerate() {
            if i + capacity < count {
                overwritten.push(event.clone());
            }
            self.writer.stage(revision, HubEntry::new(event))?;
            // (`COMMIT_REVISION_WHOLE` is true except in the loom model that shows why.)
            if !crate::loom::weaken::COMMIT_REVISION_WHOLE {
                self.writer.commit();
            }
        }
        self.writer.commit();
        {
            let guard = epoch::pin();
            let trigger = shared.trigger.as_deref();
            for i in 0..count {
                let seq = Seq::new(start.get() + i as u64);
                if let Some(event) = overwritten.get(i) {
                    registry.publish(seq, event, trigger, &shared.ring, &mut self.woken);
                // SAFETY: `guard` is `epoch::pin()`'s, a guard of the default collector.
                } else if let Read::Ready(entry) = unsafe { shared.ring.read_unchecked(seq, &guard) } {
                    registry.publish(seq, &entry.value().event, trigger, &shared.ring, &mut self.woken);
                }
            }
        }
        // Release pairs with the Acquire load in `HubCore::progress`: stored after the drains
        // of every event of the revision, so a bookmark at it follows all of them.
        shared.progress.store(revision.get(), Ordering::Release);
        drop(registry);
        self.last = revision;
        Ok(start..Seq::new(start.get() + count as u64))
    }

    /// Wakes the watchers that events published with
    /// [`publish_deferred`](Self::publish_deferred) concern; returns how many.
    pub fn flush(&mut self) -> usize {
        self.wake()
    }

    /// The source reached `revision` with no change for this hub: moves the revision that
    /// bookmarks carry (and that `StartAt::Now` reports). Takes no history slot and wakes no
    /// one. A revision at or below the hub's is ignored.
    pub fn progress(&mut self, revision: Revision) {
        if revision > self.shared.progress() {
            // Release pairs with the Acquire load in `HubCore::progress`.
            self.shared.progress.store(revision.get(), Ordering::Release);
        }
    }

    /// Sends the next group of bookmarks: flags one of [`BOOKMARK_PHASES`](crate::BOOKMARK_PHASES) groups of the
    /// watchers that asked for bookmarks and wakes them; each sends a bookmark at the hub's
    /// revision once it has read everything up to it. Called every bookmark interval /
    /// `BOOKMARK_PHASES`, it gives each such watcher one bookmark per interval, and never
    /// wakes them all at one instant. Returns how many watchers were flagged.
    pub fn send_bookmarks(&mut self) -> usize {
        lock(&self.shared.registry).bookmark_phase(&mut self.woken);
        self.wake()
    }

    /// Ends the hub: every watcher, now and later, reads what is left in the ring and then
    /// ends with [`Expired`] carrying `oldest`, the revision a new watch can start after (in
    /// whatever replaces this hub, e.g. after a relist). New watches on it fail the same way.
    ///
    /// Dropping the publisher closes the hub too, at the last published revision: a writer
    /// that is gone (its task ended or panicked) must not leave watchers parked forever.
    pub fn close(mut self, oldest: Revision) {
        self.shut(oldest);
    }

    fn shut(&mut self, oldest: Revision) {
        if self.shared.closed_at().is_some() {
            return;
        }
        // Release pairs with the Acquire loads in `HubCore::closed_at`. Stored before the
        // buckets' locks are taken below: a watcher that parks after our drain re-checks it
        // (the lock orders the two, as for the tail in the module docs).
        self.shared.closed.store(oldest.get(), Ordering::Release);
        lock(&self.shared.registry).drain_all(self.writer.ring().tail(), &mut self.woken);
        self.wake();
    }

    /// Releases the history below sequence number `keep_from` early (age-based retention);
    /// see [`RingWriter::trim`]. Returns the new floor: watches can start after it, not before.
    pub fn trim(&mut self, keep_from: Seq) -> Revision {
        self.writer.trim(keep_from)
    }

    /// The revision of the last published event (the start revision before any).
    pub fn last_revision(&self) -> Revision {
        self.last
    }

    /// The hub this publisher feeds.
    pub fn hub(&self) -> WatchHub {
        WatchHub {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Wakes the watchers collected under the registry's lock, after it was released.
    fn wake(&mut self) -> usize {
        let n = wake_all(&mut self.woken);
        if n > 0 {
            // Relaxed: a counter, written only here by the single writer.
            self.shared.wakeups.fetch_add(n as u64, Ordering::Relaxed);
        }
        n
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.shut(self.last);
    }
}

/// A watcher: a cursor into the ring, a filter and a wake cell; no queue of its own.
///
/// Read it as a `Stream` of owned [`WatchEvent`]s, or with [`poll_next_with`](Self::poll_next_with)
/// / [`next_with`](Self::next_with), which lend the event for the duration of a closure and
/// touch no shared reference count. A watcher that falls out of the history window yields
/// one `Err(Expired)` and then ends.
///
/// A selective watcher (by name, trigger value or namespace) follows its bucket's chain from
/// one of its events to the next and never reads the events in between; an unselective one
/// reads the ring in order. Idle, a watcher is this struct, its filter, a shared wake cell and
/// an entry in its bucket (`tests/watcher_memory.rs` measures it). The cost does not depend on
/// how many events are in flight: there is no per-watcher queue.
#[derive(Debug)]
pub struct Watcher {
    shared: Arc<HubCore>,
    bucket: Arc<Bucket>,
    cell: Arc<WakeCell>,
    filter: Filter,
    interest: Interest,
    /// The sequence number of the next entry to read when scanning.
    cursor: Seq,
    /// The last entry of our bucket's chain we read, and the role it plays there: our next
    /// event is the one it links to.
    chain: Option<(Seq, Role)>,
    /// The revision of the last event this watcher read (or of its start, or of its last
    /// bookmark).
    position: Revision,
    /// The revision every entry up to which this watcher has read or knows it need not: below
    /// `position` while it is inside a revision of several events, `position` once it found
    /// nothing more to read. A lap that lost no entry above it is no loss.
    complete: Revision,
    /// Entries at or below this revision are skipped (a start ahead of the ring).
    skip_through: Revision,
    bookmarks: bool,
    id: u64,
    /// Whether this watcher is filed in its bucket, having verified nothing was pending.
    parked: bool,
    done: bool,
}

/// What a watcher at its end of the ring (or of its chain) found when it looked again.
enum Next {
    /// Something to read.
    More,
    /// Nothing yet.
    Idle,
}

impl Watcher {
    /// The revision this watcher has seen every event up to.
    pub fn position(&self) -> Revision {
        self.position
    }

    /// The filter.
    pub fn filter(&self) -> &Filter {
        &self.filter
    }

    /// The filter, taken out of a watcher that ended (a catch-up goes on with it).
    pub(crate) fn take_filter(&mut self) -> Filter {
        std::mem::replace(&mut self.filter, Filter::everything())
    }

    /// Whether it receives bookmarks.
    pub(crate) fn bookmarks(&self) -> bool {
        self.bookmarks
    }

    /// The revision every event up to which this watcher delivered, or passed over as not its
    /// own, or skipped as at or below its start: where it would resume after a lap (claim 13).
    pub(crate) fn complete(&self) -> Revision {
        self.complete.max(self.skip_through)
    }

    /// Whether every event up to `revision` this watcher selects was delivered: read (or passed
    /// over) up to it, or, parked, published up to it without a stamp on its wake cell. The
    /// progress is loaded first, then the cell, as a bookmark is decided (claim 8): every event
    /// up to the progress was linked and drained before it was stored, so a drain for this
    /// watcher would show.
    pub(crate) fn delivered_through(&self, revision: Revision) -> bool {
        if self.complete() >= revision {
            return true;
        }
        if !self.parked {
            return false;
        }
        let progress = self.shared.progress();
        progress >= revision && !self.cell.is_woken()
    }

    /// Polls for the next delivery and lends it to `f`. `Ready(None)` once the watcher ended.
    pub fn poll_next_with<R>(
        &mut self,
        cx: &mut Context<'_>,
        f: impl FnOnce(Delivery<'_>) -> R,
    ) -> Poll<Option<Result<R, Expired>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if self.parked && !self.take_wake() {
            // Filed and not woken by a drain: a bookmark tick, or a spurious poll. Either way
            // we stay filed, so an event for us still wakes us with its stamp and the events
            // that went by without touching our bucket are never read (nor can they lap us).
            if self.bookmarks && self.cell.bookmark_due() {
                // Every event up to the progress was drained before it was stored: loaded
                // first, then not woken means none of them was for us (see below).
                let early = crate::loom::weaken::PROGRESS_BEFORE_IDLE_CHECK.then(|| self.shared.progress());
                if !self.take_wake() {
                    let revision = early.unwrap_or_else(|| self.shared.progress());
                    self.cell.bookmark_sent();
                    if revision >= self.position {
                        self.position = revision;
                        return Poll::Ready(Some(Ok(f(bookmark(revision)))));
                    }
                }
            }
            if self.parked {
                self.cell.set_waker(cx.waker());
                // A drain between our check and the new waker woke the old one: look again.
                if !self.take_wake() {
                    return Poll::Pending;
                }
            }
        }
        // Borrowed, not cloned: a clone would write the reference count that every watcher
        // shares on every poll.
        let ring = &*self.shared.ring;
        let guard = epoch::pin();
        let mut budget = SCAN_BUDGET;
        loop {
            follow_link(&mut self.chain, &mut self.cursor, ring, &guard);
            if self.chain.is_none() {
                // SAFETY: `guard` is `epoch::pin()`'s, a guard of the default collector.
                match unsafe { ring.read_unchecked(self.cursor, &guard) } {
                    Read::Ready(entry) => {
                        self.cursor = self.cursor.next();
                        let event = &entry.value().event;
                        let role = self.interest.role_of(event, self.shared.trigger.as_deref());
                        if let Some(role) = role.filter(|_| entry.seq() >= self.bucket.chained_from()) {
                            self.chain = Some((entry.seq(), role));
                        }
                        // Entries up to the start are skipped.
                        if entry.revision() > self.skip_through {
                            if entry.revision() > self.position {
                                // Every entry of the revision before was read (they come in
                                // order, a revision's together).
                                self.complete = self.complete.max(self.position);
                            }
                            self.position = entry.revision();
                            if let Some(d) = self.filter.deliver(event) {
                                let out = f(d);
                                self.park_ahead(&guard, cx);
                                return Poll::Ready(Some(Ok(out)));
                            }
                        }
                        budget -= 1;
                        if budget == 0 {
                            cx.waker().wake_by_ref();
                            return Poll::Pending;
                        }
                        continue;
                    }
                    Read::Lapped => {
                        // Overwritten, or released: a loss only if an entry it must still read
                        // went. Every entry at or below `complete` (or the start) was read or
                        // need not be; if the window still holds everything after that, resume
                        // there (claim 13 of `protocol.rs`).
                        // (`RESUME_AFTER_HARMLESS_LAP` is true except in the loom model that
                        // shows why.)
                        let needed_after = self.complete.max(self.skip_through);
                        let resume = crate::loom::weaken::RESUME_AFTER_HARMLESS_LAP
                            .then(|| ring.seq_after(needed_after, &guard).ok())
                            .flatten();
                        if let Some(seq) = resume {
                            self.cursor = seq;
                            budget -= 1;
                            if budget == 0 {
                                cx.waker().wake_by_ref();
                                return Poll::Pending;
                            }
                            continue;
                        }
                        self.done = true;
                        return Poll::Ready(Some(Err(Expired {
                            requested: self.position,
                            oldest: ring.floor(),
                        })));
                    }
                    Read::Empty => {}
                }
            }
            // Nothing more to read now: every entry up to the last one read was read.
            self.complete = self.complete.max(self.position);
            // Nothing to read now. A close first: loaded before looking again, so that a
            // close we see comes after every event we must still read, and we read them.
            if let Some(oldest) = self.shared.closed_at() {
                if let Next::More = self.look_again(ring, &guard) {
                    continue;
                }
                self.done = true;
                return Poll::Ready(Some(Err(Expired {
                    requested: self.position,
                    oldest,
                })));
            }
            if self.bookmarks && self.cell.bookmark_due() {
                // The progress is loaded before looking again: every event up to it was
                // published before it was stored, so if we still find nothing, we have read
                // every event up to it. (Loading it after would let a bookmark overtake an
                // event; `PROGRESS_BEFORE_IDLE_CHECK` is true except in the loom model that
                // shows it.)
                let early = crate::loom::weaken::PROGRESS_BEFORE_IDLE_CHECK.then(|| self.shared.progress());
                if let Next::More = self.look_again(ring, &guard) {
                    continue;
                }
                let revision = early.unwrap_or_else(|| self.shared.progress());
                self.cell.bookmark_sent();
                if revision >= self.position {
                    self.position = revision;
                    return Poll::Ready(Some(Ok(f(bookmark(revision)))));
                }
            }
            self.cell.set_waker(cx.waker());
            self.bucket.file(self.id, &self.cell);
            // Re-check after filing (see the module docs): an event (or link), a close or a
            // bookmark tick the writer made before it could see our entry is visible here.
            // (`RECHECK_AFTER_PARK` and `RECHECK_LINK_AFTER_PARK` are true except in the loom
            // models that show why.)
            let recheck = if self.chain.is_some() {
                crate::loom::weaken::RECHECK_LINK_AFTER_PARK
            } else {
                crate::loom::weaken::RECHECK_AFTER_PARK
            };
            if recheck
                && (matches!(self.look_again(ring, &guard), Next::More)
                    || self.shared.closed_at().is_some()
                    || (self.bookmarks && self.cell.bookmark_due()))
            {
                self.bucket.unfile(self.id, &self.cell);
                continue;
            }
            self.parked = true;
            return Poll::Pending;
        }
    }

    /// After a delivery from its bucket's chain, so that the watcher never needs that entry
    /// again: if the writer has linked the next event already, moves the cursor there now;
    /// if the bucket has no later event yet, files the watcher at once rather than at its
    /// next poll, and from then on the writer stamps it with that event. Either way traffic
    /// that laps the delivered entry before the next poll cannot lap the watcher. Re-checks
    /// the link after filing, as parking does (claim 5 of `protocol.rs`).
    fn park_ahead(&mut self, guard: &epoch::Guard, cx: &Context<'_>) {
        let ring = &*self.shared.ring;
        if follow_link(&mut self.chain, &mut self.cursor, ring, guard) || self.chain.is_none() {
            return;
        }
        self.cell.set_waker(cx.waker());
        self.bucket.file(self.id, &self.cell);
        // (`RECHECK_LINK_AFTER_PARK` is true except in the loom model that shows why.)
        if crate::loom::weaken::RECHECK_LINK_AFTER_PARK
            && (matches!(self.look_again(ring, guard), Next::More) || self.shared.closed_at().is_some())
        {
            self.bucket.unfile(self.id, &self.cell);
            follow_link(&mut self.chain, &mut self.cursor, ring, guard);
        } else {
            self.parked = true;
        }
    }

    /// Whether there is something to read now: the chain's link is stored (or its entry is
    /// gone), or, scanning, the tail moved past the cursor.
    fn look_again(&self, ring: &EventRing<HubEntry>, guard: &epoch::Guard) -> Next {
        let more = match self.chain {
            // SAFETY: `guard` is `epoch::pin()`'s (both callers pinned it), a guard of the
            // default collector.
            Some((at, role)) => match unsafe { ring.read_unchecked(at, guard) } {
                Read::Ready(entry) => entry.value().next_in(role).is_some(),
                _ => true,
            },
            None => ring.tail() > self.cursor,
        };
        if more { Next::More } else { Next::Idle }
    }

    /// Waits for the next delivery and lends it to `f`; `None` once the watcher ended.
    ///
    /// The delivery is lent for the duration of `f` (the ring's epoch is pinned meanwhile), so
    /// `f` copies what it needs, as a socket writer copies bytes into its buffer. It cannot
    /// keep the borrowed object:
    ///
    /// ```compile_fail
    /// # use std::sync::Arc;
    /// # use watchcache_core::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let (mut publisher, hub) = WatchHub::builder().build().unwrap();
    /// let mut watcher = hub.watch(WatchSpec::new(Filter::everything())).unwrap();
    /// # let pod = ObjectVersion::builder(ObjectKey::new("ns", "a"), Revision::new(1)).build();
    /// # publisher.publish(Event::Added { object: Arc::new(pod) }).unwrap();
    /// let leaked = watcher.next_with(|d| d.object).await; // the borrow would escape
    /// drop(leaked);
    /// # }
    /// ```
    ///
    /// while cloning the shared reference (or copying its bytes) is fine:
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use watchcache_core::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let (mut publisher, hub) = WatchHub::builder().build().unwrap();
    /// let mut watcher = hub.watch(WatchSpec::new(Filter::everything())).unwrap();
    /// # let pod = ObjectVersion::builder(ObjectKey::new("ns", "a"), Revision::new(1)).build();
    /// # publisher.publish(Event::Added { object: Arc::new(pod) }).unwrap();
    /// let kept = watcher.next_with(|d| d.object.cloned()).await;
    /// assert_eq!(kept.unwrap().unwrap().unwrap().key().name(), "a");
    /// # }
    /// ```
    pub async fn next_with<R>(&mut self, mut f: impl FnMut(Delivery<'_>) -> R) -> Option<Result<R, Expired>> {
        std::future::poll_fn(|cx| self.poll_next_with(cx, &mut f)).await
    }

    /// Waits for the next delivery, owned; `None` once the watcher ended.
    pub async fn next(&mut self) -> Option<Result<WatchEvent, Expired>> {
        self.next_with(|d| d.to_owned()).await
    }

    /// If a drain woke this watcher (it is no longer filed), resumes at the stamped sequence.
    fn take_wake(&mut self) -> bool {
        let Some(at) = self.cell.take_wake() else {
            return false;
        };
        self.parked = false;
        // Every event in `cursor..at` (or after our chain's last entry) went through the
        // registry while we were filed and verified idle, without touching our bucket: none
        // of them concerns us.
        self.cursor = self.cursor.max(at);
        self.chain = None;
        true
    }
}

/// Where a watcher stands after passing over entries: its cursor, the revision of the last
/// entry passed (`position`), and the revision every entry up to which was passed
/// (`complete`: below `position` while the entry it stopped at is of the same revision).
#[derive(Copy, Clone, Debug)]
struct Skimmed {
    cursor: Seq,
    position: Revision,
    complete: Revision,
}

/// Passes over the published entries from `from.cursor` that `filter` delivers nothing for (or
/// that are at or below `skip_through`), as a poll would, and stops at the first entry to
/// deliver, or at the tail. `None` when an entry it had to look at is no longer held: the start
/// fell out of the window.
fn skim(
    ring: &EventRing<HubEntry>,
    filter: &Filter,
    from: Skimmed,
    skip_through: Revision,
) -> Option<Skimmed> {
    let guard = epoch::pin();
    let mut at = from;
    loop {
        // SAFETY: `guard` is `epoch::pin()`'s, a guard of the default collector.
        match unsafe { ring.read_unchecked(at.cursor, &guard) } {
            Read::Ready(entry) => {
                let revision = entry.revision();
                if revision > skip_through {
                    if revision > at.position {
                        // Every entry of the revision before was passed (a revision's entries
                        // are adjacent): only now is that revision complete.
                        at.complete = at.complete.max(at.position);
                    }
                    if filter.deliver(&entry.value().event).is_some() {
                        return Some(at);
                    }
                    at.position = revision;
                }
                at.cursor = at.cursor.next();
            }
            Read::Empty => {
                // At the tail: the last revision passed was passed whole (it was committed whole).
                at.complete = at.complete.max(at.position);
                return Some(at);
            }
            Read::Lapped => return None,
        }
    }
}

/// On a chain whose link is stored, moves `cursor` to the linked entry and leaves the chain
/// (true); on one whose entry is gone, leaves the chain to scan on from the cursor. Takes the
/// watcher's fields, not the watcher, so that its caller may hold the ring it borrowed from it.
fn follow_link(
    chain: &mut Option<(Seq, Role)>,
    cursor: &mut Seq,
    ring: &EventRing<HubEntry>,
    guard: &epoch::Guard,
) -> bool {
    let Some((at, role)) = *chain else {
        return false;
    };
    // SAFETY: `guard` is `epoch::pin()`'s (every caller pinned it), a guard of the default
    // collector.
    match unsafe { ring.read_unchecked(at, guard) } {
        Read::Ready(entry) => match entry.value().next_in(role) {
            Some(next) => {
                *cursor = next;
                *chain = None;
                true
            }
            None => false,
        },
        // Overwritten: scan on from the cursor (just past it).
        _ => {
            *chain = None;
            false
        }
    }
}

/// A bookmark delivery at `revision`.
fn bookmark(revision: Revision) -> Delivery<'static> {
    Delivery {
        kind: EventKind::Bookmark,
        revision,
        object: None,
        initial_events_end: false,
    }
}

impl Stream for Watcher {
    type Item = Result<WatchEvent, Expired>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_next_with(cx, |d| d.to_owned())
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.cell.set_gone();
        if self.parked {
            self.bucket.unfile(self.id, &self.cell);
        }
        lock(&self.shared.registry).deregister(&self.interest, self.id);
    }
}
