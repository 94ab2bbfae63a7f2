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
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crossbeam_epoch as epoch;
use futures_core::Stream;

use crate::event::{Delivery, Event, EventKind, WatchEvent};
use crate::filter::Filter;
use crate::interest::{Index, Interest, NOT_WOKEN};
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
    ring: Arc<EventRing<Event>>,
    index: Mutex<Index>,
    /// `OPEN`, or the oldest revision a watch can start after in whatever replaced this hub.
    closed: AtomicU64,
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
            index: Mutex::new(Index::default()),
            closed: AtomicU64::new(OPEN),
            trigger: self.trigger,
            fields: self.fields.into_boxed_slice(),
            next_id: AtomicU64::new(0),
        });
        let publisher = Publisher {
            writer,
            shared: Arc::clone(&shared),
            last: self.start,
            wakers: Vec::new(),
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

    /// The ring of published events.
    pub fn ring(&self) -> &Arc<EventRing<Event>> {
        &self.shared.ring
    }

    /// The number of watchers parked in the interest index now.
    pub fn parked(&self) -> usize {
        lock(&self.shared.index).parked()
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
        let (cursor, position, skip_through) = match spec.start {
            // The head revision is only reported (as the position); nothing is skipped by
            // it, since an entry at `tail` may be published between the two loads.
            StartAt::Now => (shared.ring.tail(), shared.ring.head_revision(), Revision::ZERO),
            StartAt::After(rev) => {
                let seq = shared.ring.seq_after(rev, &guard).map_err(|oldest| Expired {
                    requested: rev,
                    oldest,
                })?;
                // `rev` may lie ahead of the ring: entries up to it are skipped when they come.
                (seq, rev, rev)
            }
        };
        let interest = match (&shared.trigger, &spec.filter) {
            (Some(t), f) if f.fields().equality(t).is_some() => {
                Interest::Trigger(f.fields().equality(t).unwrap_or_default().into())
            }
            (_, f) => match f.required_namespace() {
                Some(ns) => Interest::Namespace(ns.into()),
                None => Interest::All,
            },
        };
        Ok(Watcher {
            shared: Arc::clone(shared),
            filter: spec.filter,
            interest,
            cursor,
            position,
            skip_through,
            bookmarks: spec.bookmarks,
            id: shared.next_id.fetch_add(1, Ordering::Relaxed),
            wake_at: Arc::new(AtomicU64::new(NOT_WOKEN)),
            parked: false,
            done: false,
        })
    }
}

/// The hub's only writer. Not `Clone`.
#[derive(Debug)]
pub struct Publisher {
    writer: RingWriter<Event>,
    shared: Arc<HubCore>,
    last: Revision,
    /// Reused between events so that waking allocates nothing in the steady state.
    wakers: Vec<Waker>,
}

impl Publisher {
    /// Publishes an event and wakes the parked watchers it may concern. Object events need a
    /// revision above every earlier one; a bookmark's may equal the last. Never waits for a
    /// watcher: it only takes the index lock for as long as moving the affected wakers out.
    pub fn publish(&mut self, event: Event) -> Result<Seq, PublishError> {
        let revision = event.revision();
        let strict = !matches!(event, Event::Bookmark { .. });
        if revision < self.last || (strict && revision == self.last) {
            return Err(PublishError::RevisionNotIncreasing {
                last: self.last,
                got: revision,
            });
        }
        let seq = self.writer.push(revision, event.clone())?;
        self.last = revision;
        self.wake(seq, &event);
        Ok(seq)
    }

    /// Publishes a bookmark at `revision` (at least the last published revision).
    pub fn bookmark(&mut self, revision: Revision) -> Result<Seq, PublishError> {
        self.publish(Event::Bookmark { revision })
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
        // Release pairs with the Acquire loads in `HubCore::closed_at`. Stored before the index
        // lock is taken below: a watcher that parks after our drain re-checks it (the lock
        // orders the two, as for the tail in the module docs).
        self.shared.closed.store(oldest.get(), Ordering::Release);
        lock(&self.shared.index).drain_all(self.writer.ring().tail(), &mut self.wakers);
        for waker in self.wakers.drain(..) {
            waker.wake();
        }
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

    fn wake(&mut self, seq: Seq, event: &Event) {
        let mut index = lock(&self.shared.index);
        match (event.object(), &self.shared.trigger) {
            (None, _) => index.drain_all(seq, &mut self.wakers),
            (Some(object), trigger) => {
                let t = trigger.as_deref();
                let triggers = [
                    t.map(|t| object.field(t).unwrap_or("")),
                    t.zip(event.prev()).map(|(t, prev)| prev.field(t).unwrap_or("")),
                ];
                index.drain_for(seq, object.key().namespace(), triggers, &mut self.wakers);
            }
        }
        drop(index);
        for waker in self.wakers.drain(..) {
            waker.wake();
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.shut(self.last);
    }
}

/// A watcher: a cursor into the ring, a filter and a waker; no queue of its own.
///
/// Read it as a `Stream` of owned [`WatchEvent`]s, or with [`poll_next_with`](Self::poll_next_with)
/// / [`next_with`](Self::next_with), which lend the event for the duration of a closure and
/// touch no shared reference count. A watcher that falls out of the history window yields
/// one `Err(Expired)` and then ends.
///
/// Idle, a watcher is this struct (144 bytes on x86-64), its filter, one entry in the
/// interest index and a shared 8-byte wake cell. Measured by `tests/watcher_memory.rs` with a
/// counting allocator over 20,000 parked watchers: 222 bytes each unfiltered, 216 filtered by
/// namespace, 516 filtered by a distinct `spec.nodeName` each (its own index bucket). The
/// cost does not depend on how many events are in flight: there is no per-watcher queue.
#[derive(Debug)]
pub struct Watcher {
    shared: Arc<HubCore>,
    filter: Filter,
    interest: Interest,
    /// The sequence number of the next entry to read.
    cursor: Seq,
    /// The revision this watcher has seen everything up to.
    position: Revision,
    /// Entries at or below this revision are skipped (a start ahead of the ring).
    skip_through: Revision,
    bookmarks: bool,
    id: u64,
    /// Stamped by the writer with the sequence number that woke this watcher; see `interest.rs`.
    wake_at: Arc<AtomicU64>,
    /// Whether this watcher is filed in the interest index, having verified nothing was pending.
    parked: bool,
    done: bool,
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
            // Polled while filed and not woken: spurious, or the writer is between storing
            // the tail and draining the index.
            if self.shared.ring.tail() > self.cursor || self.shared.closed_at().is_some() {
                self.unpark();
            } else {
                let refreshed = lock(&self.shared.index).refresh(self.id, &self.interest, cx.waker());
                if refreshed || !self.take_wake() {
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
            // SAFETY: `guard` is `epoch::pin()`'s, a guard of the default collector.
            match unsafe { ring.read_unchecked(self.cursor, &guard) } {
                Read::Ready(entry) => {
                    self.cursor = self.cursor.next();
                    // Entries up to the start are skipped; a bookmark at the start itself is
                    // kept (a quiet resource's periodic bookmark carries the same revision).
                    let skip = match entry.value() {
                        Event::Bookmark { .. } => entry.revision() < self.skip_through,
                        _ => entry.revision() <= self.skip_through,
                    };
                    let delivery = if skip {
                        None
                    } else {
                        self.position = entry.revision();
                        self.filter
                            .deliver(entry.value())
                            .filter(|d| self.bookmarks || d.kind != EventKind::Bookmark)
                    };
                    if let Some(d) = delivery {
                        return Poll::Ready(Some(Ok(f(d))));
                    }
                    budget -= 1;
                    if budget == 0 {
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                }
                Read::Lapped => {
                    self.done = true;
                    return Poll::Ready(Some(Err(Expired {
                        requested: self.position,
                        oldest: ring.floor(),
                    })));
                }
                Read::Empty => {
                    if let Some(oldest) = self.shared.closed_at() {
                        self.done = true;
                        return Poll::Ready(Some(Err(Expired {
                            requested: self.position,
                            oldest,
                        })));
                    }
                    lock(&self.shared.index).park(self.id, &self.interest, cx.waker(), &self.wake_at);
                    // Re-check after filing (see the module docs): an event published, or a
                    // close, before the writer could see our entry is visible here.
                    // (`RECHECK_AFTER_PARK` is true except in the loom model that shows why.)
                    if crate::loom::weaken::RECHECK_AFTER_PARK
                        && (ring.tail() > self.cursor || self.shared.closed_at().is_some())
                    {
                        unpark(&self.shared, self.id, &self.interest, &self.wake_at);
                        continue;
                    }
                    self.parked = true;
                    return Poll::Pending;
                }
            }
        }
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

    /// If the writer woke this watcher, leaves the index and resumes at the stamped sequence.
    fn take_wake(&mut self) -> bool {
        // Acquire pairs with the Release store in `Index::drain`.
        let at = self.wake_at.load(Ordering::Acquire);
        if at == NOT_WOKEN {
            return false;
        }
        // The writer removed our entry when it stamped the cell, so nobody else writes it now;
        // the next stamp can only follow a new `park`, ordered by the index lock.
        self.wake_at.store(NOT_WOKEN, Ordering::Relaxed);
        self.parked = false;
        // Every event in `cursor..at` went through the index while we were filed and
        // verified idle, without touching our bucket: none of them concerns us.
        self.cursor = self.cursor.max(Seq::new(at));
        true
    }

    /// Leaves the index by ourselves; reads on from our own cursor (a stamp the writer may
    /// have set meanwhile is discarded: our cursor is never ahead of what we must read).
    fn unpark(&mut self) {
        unpark(&self.shared, self.id, &self.interest, &self.wake_at);
        self.parked = false;
    }
}

/// [`Watcher::unpark`] on borrowed fields, for use while the ring is borrowed from `shared`.
fn unpark(shared: &HubCore, id: u64, interest: &Interest, wake_at: &AtomicU64) {
    lock(&shared.index).unpark(id, interest);
    // Under the lock the writer can no longer stamp us; the Relaxed store is ordered before
    // any later stamp by the lock taken in the next `park`.
    wake_at.store(NOT_WOKEN, Ordering::Relaxed);
}

impl Stream for Watcher {
    type Item = Result<WatchEvent, Expired>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_next_with(cx, |d| d.to_owned())
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        if self.parked {
            lock(&self.shared.index).unpark(self.id, &self.interest);
        }
    }
}
